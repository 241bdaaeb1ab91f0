// `train --device cuda` (app/train/device_trainer.h) against the CPU trainer from the same seed: the loss
// curves agree within tolerance (step 0 within kStartTol: same bf16 params, only the network's
// rounding differs; every step within kCurveTol: 20 AdamW steps on near-equal gradients drift by
// bf16 rounding flips), the loss falls, and on 2 GPUs both ranks hold identical params after every
// step (lib/ARCHITECTURE.md invariant 1). The same for Muon on the layer-wise pipeline ([device-layerwise]),
// and for `--compute bf16` against the CPU's bf16 reference (kBf16StartTol, kBf16CurveTol: cuBLASLt
// sums in another order than the CPU's BLAS, so a bf16 rounding of an activation flips here and there).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "catch.h"
#include "pipeline/device/device_buffer.h"
#include "pipeline/device/device_rank_pipeline.h"
#include "app/train/device_trainer.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"
#include "model/spec_json.h"
#include "optim_device_util.h"
#include "app/train/trainer.h"
#include "unit/pipeline_test_util.h"

namespace {

constexpr double kStartTol = 1e-4;
constexpr double kCurveTol = 1e-2;
constexpr double kBf16StartTol = 2e-3;
constexpr double kBf16CurveTol = 2e-2;

fpg::app::train::TrainOptions tiny_options(uint32_t dp) {
  fpg::app::train::TrainOptions o;
  o.spec = fpg::model::resolve_model("tiny");
  o.dp = dp;
  o.steps = 20;
  o.micro_batch = 32;
  o.seed = 1234;
  return o;
}

// Every param of a device rank, downloaded.
std::vector<std::vector<float>> download_params(const fpg::device::DeviceRankPipeline& rank,
                                                const fpg::model::ModelSpec& spec) {
  std::vector<std::vector<float>> out;
  for (size_t p = 0; p < spec.params.size(); ++p)
    out.push_back(fpg::device::download(rank.params()[p], spec.params[p].numel(), rank.stream()));
  return out;
}

void check_against_cpu(uint32_t dp, bool muon = false, fpg::model::Compute compute = fpg::model::Compute::fp32) {
  const bool bf16 = compute == fpg::model::Compute::bf16;
  if (!fpg::app::train::device_training_built()) {  // a CUDA build without NCCL
    std::printf("no NCCL in this build: [device-train] not run\n");
    return;
  }
  fpg::app::train::TrainOptions o = tiny_options(dp);
  if (muon) {  // train's Muon defaults (cmd/train.cpp)
    o.pipeline.optimizer = fpg::optim::OptimizerKind::muon;
    o.pipeline.dist_opt = fpg::pipeline::DistOpt::layerwise;
    o.pipeline.lr = 3e-3;
    o.pipeline.clip_grad = 1.0;
  }
  o.compute = compute;
  o.comm = "threads";
  const fpg::app::train::TrainResult cpu = fpg::app::train::train(o);
  o.comm = "nccl";
  // per rank, per step: the params after that step (bf16: their stored bytes)
  std::vector<std::vector<std::vector<std::vector<float>>>> snaps(dp);
  std::vector<std::vector<std::vector<std::vector<uint8_t>>>> bytes(dp);
  const fpg::app::train::TrainResult gpu =
      fpg::app::train::train_on_device(o, [&](uint64_t, const fpg::device::DeviceRankPipeline& rank) {
        // the rank's index is the order of its snapshots' owner: ranks run on their own threads
        const int device = [] {
          int d = 0;
          FPG_CUDA_CHECK(cudaGetDevice(&d));
          return d;
        }();
        if (!bf16) {
          snaps[size_t(device)].push_back(download_params(rank, o.spec));
          return;
        }
        std::vector<std::vector<uint8_t>> b;
        for (uint32_t p = 0; p < o.spec.params.size(); ++p) b.push_back(rank.stored_bytes(p));
        bytes[size_t(device)].push_back(std::move(b));
      });
  REQUIRE(gpu.has_rank0);
  REQUIRE(gpu.steps.size() == 20);
  REQUIRE(cpu.steps.size() == 20);
  const double start_tol = bf16 ? kBf16StartTol : kStartTol, curve_tol = bf16 ? kBf16CurveTol : kCurveTol;
  CHECK(std::fabs(gpu.steps[0].loss - cpu.steps[0].loss) <= start_tol * cpu.steps[0].loss);
  double worst = 0;
  for (size_t t = 0; t < 20; ++t) {
    INFO("dp " << dp << " step " << t << " gpu " << gpu.steps[t].loss << " cpu " << cpu.steps[t].loss);
    CHECK(std::fabs(gpu.steps[t].loss - cpu.steps[t].loss) <= curve_tol * cpu.steps[t].loss);
    CHECK(!gpu.steps[t].skipped);
    worst = std::max(worst, std::fabs(gpu.steps[t].loss - cpu.steps[t].loss) / cpu.steps[t].loss);
  }
  std::printf("[device-train] %s dp %u%s: loss %.7f -> %.7f (gpu), %.7f -> %.7f (cpu); worst step %.3g relative\n",
              fpg::model::compute_name(compute), dp, muon ? " muon" : "", gpu.steps[0].loss, gpu.steps[19].loss,
              cpu.steps[0].loss, cpu.steps[19].loss, worst);
  CHECK(gpu.summary.final_loss < gpu.summary.initial_loss);
  CHECK(gpu.summary.dp == dp);
  CHECK(gpu.summary.step_time_ms > 0);
  for (uint32_t r = 1; r < dp; ++r) {
    REQUIRE(snaps[r].size() == snaps[0].size());
    for (size_t s = 0; s < snaps[0].size(); ++s)
      for (size_t p = 0; p < snaps[0][s].size(); ++p) {
        INFO("rank " << r << " snapshot " << s << " param " << p);
        CHECK(fpg_gpu_test::mismatches(snaps[r][s][p], snaps[0][s][p]) == 0);
      }
  }
  for (uint32_t r = 1; r < dp; ++r) {
    REQUIRE(bytes[r].size() == bytes[0].size());
    for (size_t s = 0; s < bytes[0].size(); ++s) CHECK(bytes[r][s] == bytes[0][s]);
  }
  CHECK((bf16 ? bytes[0].size() : snaps[0].size()) == 21);  // after construction and after each of the 20 steps
}

}  // namespace

TEST_CASE("train --device cuda on 1 GPU follows the CPU loss curve", "[device-train]") {
  check_against_cpu(1);
}

TEST_CASE("train --device cuda on 2 GPUs follows the CPU curve with identical ranks", "[device-train]") {
  if (fpg::cuda::device_count() < 2) {
    std::printf("one GPU: the dp 2 run of [device-train] needs two, not run\n");
    return;
  }
  check_against_cpu(2);
}

TEST_CASE("train --device cuda --compute bf16 follows the CPU's bf16 loss curve", "[device-train][bf16]") {
  check_against_cpu(1, false, fpg::model::Compute::bf16);
  if (fpg::cuda::device_count() >= 2) check_against_cpu(2, false, fpg::model::Compute::bf16);
}

TEST_CASE("train --device cuda refuses what it does not support", "[device-train]") {
  fpg::app::train::TrainOptions o = tiny_options(1);
  o.comm = "threads";
  REQUIRE_THROWS_AS(fpg::app::train::train_on_device(o), fpg::UsageError);
  o.comm = "nccl";
  o.dp = static_cast<uint32_t>(fpg::cuda::device_count() + 1);
  REQUIRE_THROWS_AS(fpg::app::train::train_on_device(o), fpg::UsageError);
}

TEST_CASE("train --device cuda with Muon (layer-wise) follows the CPU loss curve", "[device-layerwise]") {
  check_against_cpu(1, true);
  if (fpg::cuda::device_count() >= 2) check_against_cpu(2, true);
}
