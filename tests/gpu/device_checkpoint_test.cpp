// Checkpoints of `train --device cuda` (app/checkpoint/device_state_mirror.h, app/checkpoint/checkpointing.h):
//   - lib/ARCHITECTURE.md invariant 4 on the device: N steps uninterrupted == k steps + save + load + N-k steps,
//     bitwise (every rank's masters, moments, step, FP8 scale state and amax histories, every param's
//     stored bytes, and the losses of the resumed steps), for adamw bf16 and FP8 delayed scaling, DP 1
//     and (two GPUs) DP 2;
//   - the format does not depend on the device: a GPU checkpoint loads into a CPU run and a CPU one
//     into a GPU run, and the loaded state equals the saved one bit for bit;
//   - the same for layer-wise Muon with FP8 delayed scaling (the matrices' amax histories and scales),
//     resume and both cross-device loads;
//   - the CPU and GPU pipelines fed the same gradients (the elementwise parts are bitwise equal:
//     device_pipeline_test.cpp) write the same documents and the same chunks (manifest: every chunk's range, sizes and checksums),
//     bucketed and layer-wise (adamw, FP8 delayed);
//   - lib/ARCHITECTURE.md invariant 3 on the device: --dp 2 equals --dp 1 --accumulation 2 bitwise (the network
//     is deterministic cuBLAS, accumulation adds the second micro-batch's gradient with one fp32 add,
//     and NCCL's 2-rank sum is that same single add).
#include <cuda_runtime.h>

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "catch.h"
#include "comm/group.h"
#include "comm/nccl_backend.h"
#include "core/fs.h"
#include "pipeline/device/device_rank_pipeline.h"
#include "app/checkpoint/device_state_mirror.h"
#include "app/train/device_trainer.h"
#include "ckpt/manifest_blob.h"
#include "formats/fpckpt/rank_writer.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"
#include "model/presets.h"
#include "pipeline/rank_pipeline.h"
#include "app/checkpoint/checkpointing.h"
#include "app/checkpoint/rank_state_access.h"
#include "app/checkpoint/state_documents.h"
#include "app/checkpoint/state_save.h"
#include "unit/pipeline_test_util.h"

namespace {

using fpg::pipeline::RankState;
using fpg::pipeline::test::RankSnap;
using fpg::pipeline::test::same_floats;

constexpr uint64_t kSteps = 6, kSplit = 3;

// A fresh directory's path for a checkpoint root (the root itself is created by the run).
std::string temp_dir(const std::string& tag) {
  char tmpl[] = "/tmp/fpg-devckpt-XXXXXX";
  const char* d = mkdtemp(tmpl);
  REQUIRE(d != nullptr);
  return std::string(d) + "/" + tag;
}

std::vector<int> dps() {
  std::vector<int> out{1};
  if (fpg::cuda::device_count() >= 2) out.push_back(2);
  return out;
}

fpg::app::train::TrainOptions options(uint32_t dp, const std::string& fp8) {
  fpg::app::train::TrainOptions o;
  o.spec = fpg::pipeline::test::spec32();  // matrix dims multiples of 32: every FP8 recipe takes it
  o.dp = dp;
  o.steps = kSteps;
  o.micro_batch = 16;
  o.seed = 77;
  o.comm = "nccl";
  o.pipeline.lr = 3e-3;
  o.pipeline.clip_grad = 1.0;
  o.pipeline.bucket_size = 2000;  // several buckets: fragments cut params
  fpg::pipeline::test::set_fp8(o.pipeline, fp8);
  return o;
}

// The differences of two rank states (empty: bitwise equal).
std::string diff_optimizer(const fpg::pipeline::OptimizerState& x, const fpg::pipeline::OptimizerState& y,
                           const std::string& part) {
  std::string d;
  if (x.step != y.step) d += " " + part + " step " + std::to_string(x.step) + "/" + std::to_string(y.step);
  if (!same_floats(x.master, y.master)) d += " " + part + " master";
  if (!same_floats(x.exp_avg, y.exp_avg)) d += " " + part + " exp_avg";
  if (!same_floats(x.exp_avg_sq, y.exp_avg_sq)) d += " " + part + " exp_avg_sq";
  if (!same_floats(x.momentum, y.momentum)) d += " " + part + " momentum";
  if (x.fragments.size() != y.fragments.size()) d += " " + part + " fragments";
  return d;
}

std::string diff_state(const RankState& a, const RankState& b) {
  std::string d = diff_optimizer(a.bucketed, b.bucketed, "bucketed") + diff_optimizer(a.layer_wise, b.layer_wise, "layer-wise");
  if (a.fp8.size() != b.fp8.size()) return d + " fp8 count";
  for (size_t i = 0; i < a.fp8.size(); ++i) {
    const auto& s = a.fp8[i];
    const auto& t = b.fp8[i];
    const std::string n = " fp8[" + std::to_string(i) + "].";
    if (!same_floats(s.scales.scale, t.scales.scale)) d += n + "scale";
    if (!same_floats(s.scales.scale_inv, t.scales.scale_inv)) d += n + "scale_inv";
    if (s.scales.e8m0 != t.scales.e8m0 || s.scales.e8m0_col != t.scales.e8m0_col) d += n + "e8m0";
    if (!same_floats(s.delayed.amax_history, t.delayed.amax_history)) d += n + "amax_history";
    if (std::memcmp(&s.delayed.scale, &t.delayed.scale, 4) || std::memcmp(&s.delayed.scale_inv, &t.delayed.scale_inv, 4))
      d += n + "delayed scale";
  }
  return d;
}

std::string diff_snaps(const std::vector<RankSnap>& a, const std::vector<RankSnap>& b) {
  if (a.size() != b.size()) return " ranks";
  std::string d;
  for (size_t r = 0; r < a.size(); ++r) {
    const std::string s = diff_state(a[r].state, b[r].state);
    if (!s.empty()) d += " rank " + std::to_string(r) + ":" + s;
    for (size_t p = 0; p < a[r].bytes.size(); ++p)
      if (p >= b[r].bytes.size() || a[r].bytes[p] != b[r].bytes[p])
        d += " rank " + std::to_string(r) + " param " + std::to_string(p) + " bytes";
  }
  return d;
}

// A device run with checkpoints; every rank's snapshot when it has taken `at` steps.
struct DeviceRun {
  fpg::app::checkpoint::CheckpointedResult result;
  std::vector<RankSnap> snap;
};

DeviceRun run_device(const fpg::app::train::TrainOptions& o, const fpg::app::checkpoint::CheckpointOptions& c, uint64_t at) {
  DeviceRun out;
  out.snap.resize(o.dp);
  std::mutex mu;
  out.result = fpg::app::train::train_on_device_with_checkpoints(
      o, c, [&](uint64_t done, const fpg::device::DeviceRankPipeline& rank) {
        if (done != at) return;
        RankSnap s;
        s.state = rank.download_state();
        for (uint32_t p = 0; p < rank.spec().params.size(); ++p) s.bytes.push_back(rank.stored_bytes(p));
        std::lock_guard<std::mutex> lock(mu);
        out.snap[s.state.rank] = std::move(s);
      });
  return out;
}

std::vector<RankSnap> run_cpu(fpg::app::train::TrainOptions o, const fpg::app::checkpoint::CheckpointOptions& c, uint64_t at) {
  o.comm = "threads";
  std::vector<RankSnap> snap(o.dp);
  fpg::app::checkpoint::train_with_checkpoints(o, c, [&](uint64_t done, const fpg::pipeline::RankPipeline& rank) {
    if (done != at) return;
    RankSnap& s = snap[rank.state().rank];  // each rank its own slot
    s.state = rank.state();
    for (uint32_t p = 0; p < rank.spec().params.size(); ++p) s.bytes.push_back(rank.stored_bytes(p));
  });
  return snap;
}

bool nccl_built() {
  if (fpg::app::train::device_training_built()) return true;
  std::printf("no NCCL in this build: [device-ckpt] not run\n");
  return false;
}

// Layer-wise Muon: whole matrices per owner, their state and bytes in the layer-wise part.
void set_layer_wise_muon(fpg::app::train::TrainOptions& o) {
  o.pipeline.optimizer = fpg::optim::OptimizerKind::muon;
  o.pipeline.dist_opt = fpg::pipeline::DistOpt::layerwise;
}

void check_resume(const std::string& fp8, bool muon = false) {
  for (int dp : dps()) {
    const std::string where = fp8 + (muon ? " muon" : "") + " dp=" + std::to_string(dp);
    fpg::app::train::TrainOptions o = options(static_cast<uint32_t>(dp), fp8);
    if (muon) set_layer_wise_muon(o);
    const DeviceRun whole = run_device(o, {}, kSteps);

    fpg::app::checkpoint::CheckpointOptions save;
    save.save = temp_dir("first");
    o.steps = kSplit;
    const DeviceRun first = run_device(o, save, kSplit);
    REQUIRE(first.result.checkpoints.saved.size() == 1);

    fpg::app::checkpoint::CheckpointOptions load;
    load.load = save.save;  // through `latest`
    o.steps = kSteps;
    const DeviceRun second = run_device(o, load, kSteps);
    CHECK(second.result.checkpoints.loaded_step == kSplit);
    CHECK(second.result.train.summary.first_step == kSplit);

    CHECK(where + diff_snaps(whole.snap, second.snap) == where);
    // The resumed steps' losses are the uninterrupted run's, bitwise.
    REQUIRE(second.result.train.steps.size() == kSteps - kSplit);
    for (uint64_t t = 0; t < kSteps - kSplit; ++t) {
      INFO(where << " step " << kSplit + t);
      CHECK(second.result.train.steps[t].step == kSplit + t);
      CHECK(std::memcmp(&second.result.train.steps[t].loss, &whole.result.train.steps[kSplit + t].loss, 8) == 0);
    }
    // The run trained: the state at the split differs from the end.
    CHECK(!diff_snaps(first.snap, whole.snap).empty());
  }
}

}  // namespace

TEST_CASE("device train: k steps + save + load + N-k steps equals N steps bitwise: adamw bf16", "[device-ckpt]") {
  if (nccl_built()) check_resume("none");
}

TEST_CASE("device train: k steps + save + load + N-k steps equals N steps bitwise: FP8 delayed", "[device-ckpt]") {
  if (nccl_built()) check_resume("delayed");
}

TEST_CASE("device train: k steps + save + load + N-k steps equals N steps bitwise: layer-wise Muon", "[device-ckpt]") {
  if (!nccl_built()) return;
  check_resume("none", true);
  check_resume("tensorwise", true);
  check_resume("mxfp8", true);
}

TEST_CASE("device train: k steps + save + load + N-k steps equals N steps bitwise: layer-wise Muon, FP8 delayed",
          "[device-ckpt]") {
  if (nccl_built()) check_resume("delayed", true);  // the matrices' amax histories and scales in the checkpoint
}

namespace {

// FP8 delayed: a GPU checkpoint loads into a CPU run and a CPU one into a GPU run, with the state saved.
void check_cross_device(bool muon) {
  for (int dp : dps()) {
    const std::string where = std::string(muon ? "layer-wise muon " : "") + "dp=" + std::to_string(dp);
    fpg::app::train::TrainOptions o = options(static_cast<uint32_t>(dp), "delayed");
    if (muon) set_layer_wise_muon(o);
    o.steps = kSplit;

    // GPU saves, CPU loads: what the CPU pipeline holds after the load is what the GPU held.
    fpg::app::checkpoint::CheckpointOptions gsave;
    gsave.save = temp_dir("gpu");
    const DeviceRun g = run_device(o, gsave, kSplit);
    fpg::app::checkpoint::CheckpointOptions cload;
    cload.load = gsave.save;
    fpg::app::train::TrainOptions more = o;
    more.steps = kSplit + 1;
    const std::vector<RankSnap> c_loaded = run_cpu(more, cload, kSplit);
    CHECK(where + " gpu->cpu" + diff_snaps(g.snap, c_loaded) == where + " gpu->cpu");

    // CPU saves, GPU loads.
    fpg::app::checkpoint::CheckpointOptions csave;
    csave.save = temp_dir("cpu");
    const std::vector<RankSnap> c = run_cpu(o, csave, kSplit);
    fpg::app::checkpoint::CheckpointOptions gload;
    gload.load = csave.save;
    const DeviceRun g_loaded = run_device(more, gload, kSplit);
    CHECK(where + " cpu->gpu" + diff_snaps(c, g_loaded.snap) == where + " cpu->gpu");
    CHECK(g_loaded.result.train.steps.size() == 1);
  }
}

}  // namespace

TEST_CASE("device and CPU checkpoints load into each other with the state they saved", "[device-ckpt]") {
  if (nccl_built()) check_cross_device(false);
}

TEST_CASE("device and CPU layer-wise delayed-FP8 checkpoints load into each other", "[device-ckpt]") {
  if (nccl_built()) check_cross_device(true);
}

namespace {

// Deterministic gradients of (step, rank, param, element) plus a multiple of the decoded value.
float unit(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<float>(static_cast<uint32_t>(x) >> 8) * 0x1p-23f - 1.0f;
}

void fill_grad(int step, uint32_t rank, uint32_t p, const float* values, float* g, uint64_t n) {
  for (uint64_t e = 0; e < n; ++e)
    g[e] = unit(((uint64_t(step) * 131 + p) * 8 + rank) << 32 ^ e) + 0.25f * values[e];
}

void init_values(uint32_t p, float* out, uint64_t n) {
  for (uint64_t e = 0; e < n; ++e) out[e] = 0.5f * unit((uint64_t{p} << 40) ^ (e * 2654435761ull) ^ 0x55);
}

// One rank's checkpoint share: its manifest, its rank file's bytes, the documents.
struct Share {
  std::vector<uint8_t> manifest;
  std::string file;
  std::string documents;
};

Share write_share(const fpg::app::checkpoint::RankStateAccess& rank, uint32_t r, const std::string& dir) {
  REQUIRE((mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST));
  Share s;
  fpg::fpckpt::RankWriter w(dir, r);
  fpg::app::checkpoint::save_rank_state(w, rank, {});
  s.manifest = fpg::ckpt::manifest_to_bytes(w.finish());
  std::ifstream in(fpg::fs::join_path(dir, fpg::fpckpt::rank_file_name(r)), std::ios::binary);
  s.file.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const fpg::app::train::TrainCursor cursor{1, 2, 16, 1, rank.state().dp};
  const auto docs = fpg::app::checkpoint::state_documents(rank, cursor, fpg::ckpt::StateLayout::bucket);
  for (const auto& [name, json] : docs.all()) s.documents += name + "=" + json + "\n";
  return s;
}

}  // namespace

TEST_CASE("CPU and GPU pipelines fed the same gradients save the same checkpoint (documents and chunk checksums)", "[device-ckpt]") {
  if (!nccl_built()) return;
  const int kGradSteps = 2;
  for (const std::string name : {"none", "delayed", "blockwise", "layerwise/delayed"}) {
    for (int dp : dps()) {
      const std::string where = name + " dp=" + std::to_string(dp);
      const bool layer_wise = name.rfind("layerwise/", 0) == 0;  // adamw on whole matrices: bitwise too
      fpg::pipeline::PipelineConfig cfg = options(1, layer_wise ? name.substr(10) : name).pipeline;
      if (layer_wise) cfg.dist_opt = fpg::pipeline::DistOpt::layerwise;
      const fpg::model::ModelSpec spec = fpg::pipeline::test::spec32();
      const std::string root = temp_dir("same");
      REQUIRE(mkdir(root.c_str(), 0755) == 0);
      std::vector<Share> cpu(static_cast<size_t>(dp)), gpu(static_cast<size_t>(dp));
      const auto init = [&](uint32_t p, float* v) { init_values(p, v, spec.params[p].numel()); };
      fpg::comm::make_communicator_group("threads", dp)->run([&](fpg::comm::Communicator& comm) {
        const uint32_t r = static_cast<uint32_t>(comm.rank());
        fpg::pipeline::RankPipeline pipe(spec, cfg, comm, init);
        for (int s = 0; s < kGradSteps; ++s)
          pipe.step([&](const std::vector<const float*>& params, const std::vector<float*>& grads) {
            for (uint32_t p = 0; p < params.size(); ++p) fill_grad(s, r, p, params[p], grads[p], spec.params[p].numel());
          }, 2 * static_cast<uint64_t>(dp));
        cpu[r] = write_share(fpg::app::checkpoint::PipelineAccess(pipe), r, root + "/cpu");
      });
      fpg::comm::make_nccl_group(dp)->run([&](fpg::comm::Communicator& comm) {
        const uint32_t r = static_cast<uint32_t>(comm.rank());
        fpg::device::DeviceRankPipeline pipe(spec, cfg, comm, init);
        for (int s = 0; s < kGradSteps; ++s)
          pipe.step([&](const std::vector<const float*>& params, const std::vector<float*>& grads) {
            const cudaStream_t stream = pipe.stream();
            std::vector<std::vector<float>> g(params.size());
            std::vector<float> v;
            for (uint32_t p = 0; p < params.size(); ++p) {
              const uint64_t n = spec.params[p].numel();
              v.resize(n);
              g[p].resize(n);
              FPG_CUDA_CHECK(cudaMemcpyAsync(v.data(), params[p], n * 4, cudaMemcpyDeviceToHost, stream));
              FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
              fill_grad(s, r, p, v.data(), g[p].data(), n);
              FPG_CUDA_CHECK(cudaMemcpyAsync(grads[p], g[p].data(), n * 4, cudaMemcpyHostToDevice, stream));
            }
            FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
          }, 2 * static_cast<uint64_t>(dp));
        fpg::app::checkpoint::DeviceStateMirror mirror(pipe);
        gpu[r] = write_share(mirror, r, root + "/gpu");
      });
      for (int r = 0; r < dp; ++r) {
        INFO(where << " rank " << r);
        CHECK(!cpu[r].file.empty());
        CHECK(cpu[r].documents == gpu[r].documents);
        // The manifest holds every chunk's key, range, sizes and checksums of the stored and the
        // logical bytes. The HDF5 container's own bytes are not compared: measured on the H200 host,
        // they differ between two files of identical chunks (HDF5 metadata placement), so they are
        // not a function of the checkpoint's content.
        CHECK(cpu[r].manifest == gpu[r].manifest);
      }
    }
  }
}

TEST_CASE("device train: --dp 2 equals --dp 1 --accumulation 2 bitwise (invariant 3)", "[device-ckpt]") {
  if (!nccl_built()) return;
  if (fpg::cuda::device_count() < 2) {
    std::printf("one GPU: invariant 3 of [device-ckpt] needs two, not run\n");
    return;
  }
  for (const std::string fp8 : {"none", "delayed"}) {
    fpg::app::train::TrainOptions two = options(2, fp8), one = options(1, fp8);
    one.accumulation = 2;
    const DeviceRun a = run_device(two, {}, kSteps), b = run_device(one, {}, kSteps);
    // The ranks' fragments differ with the DP size: compare whole params' state and stored bytes.
    const fpg::pipeline::test::FullState fa = fpg::pipeline::test::full_state(a.snap, two.spec);
    const fpg::pipeline::test::FullState fb = fpg::pipeline::test::full_state(b.snap, one.spec);
    for (const auto& [name, per] : fa.arrays) {
      REQUIRE(fb.arrays.count(name) == 1);
      for (size_t p = 0; p < per.size(); ++p) {
        INFO(fp8 << " " << name << " of param " << p);
        CHECK(same_floats(per[p], fb.arrays.at(name)[p]));
      }
    }
    for (size_t p = 0; p < a.snap[0].bytes.size(); ++p) {
      INFO(fp8 << " stored bytes of param " << p);
      CHECK(a.snap[0].bytes[p] == b.snap[0].bytes[p]);
    }
    for (uint64_t t = 0; t < kSteps; ++t) {
      INFO(fp8 << " loss of step " << t);
      CHECK(std::memcmp(&a.result.train.steps[t].loss, &b.result.train.steps[t].loss, 8) == 0);
      CHECK(std::memcmp(&a.result.train.steps[t].grad_norm, &b.result.train.steps[t].grad_norm, 8) == 0);
    }
  }
}
