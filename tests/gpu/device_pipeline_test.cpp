// The device bucketed pipeline (lib/pipeline/device/device_rank_pipeline.h) against the CPU RankPipeline:
// the same spec, config and deterministic gradients on a threads group (CPU) and an nccl group (GPU)
// of the same dp, K steps, then every rank's state (masters, moments, step, FP8 scale state), every
// param's stored bytes and every StepReport's norm / clip / skip are compared bit for bit (NaN equals
// NaN, kernels/README.md). Optimizers adamw, adam, lion × params bf16 (+ fp32-kept matrices and
// norms), FP8 tensorwise, delayed, blockwise 128x128 and 1x128, MXFP8 rowwise+columnwise; awkward
// sizes (fc1 144x40, blockwise grids with partial blocks) and small buckets (fragments cut rows and
// blocks). DP=1 always, DP=2 with two GPUs (NCCL's 2-rank sum equals the threads backend's bitwise);
// there every rank's stored bytes must also be identical (lib/ARCHITECTURE.md invariant 1).
//
// The runs, gradients and comparisons: device_pipeline_util.h (shared with the layer-wise test).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "catch.h"
#include "device_pipeline_util.h"

namespace {

using namespace fpg::test::devcmp;

const char* const kFp8Modes[] = {"none", "tensorwise", "delayed", "blockwise", "blockwise-1x128", "mxfp8"};

void check_cases(const std::vector<Case>& cases) {
  for (int dp : dps()) {
    const Runs cpu = run_cpu(cases, dp);
    const Runs gpu = run_gpu(cases, dp);
    for (size_t k = 0; k < cases.size(); ++k) {
      for (int r = 0; r < dp; ++r) {
        const std::string where = cases[k].name + " dp=" + std::to_string(dp) + " rank " + std::to_string(r);
        CHECK(where + ": " + diff_run(cpu[k][static_cast<size_t>(r)], gpu[k][static_cast<size_t>(r)]) ==
              where + ": ");
        // Invariant 1: every rank holds the same params and FP8 state after every step.
        const RankRun& mine = gpu[k][static_cast<size_t>(r)];
        for (size_t s = 0; r > 0 && s < mine.snaps.size(); ++s) {
          const bool same = mine.snaps[s].bytes == gpu[k][0].snaps[s].bytes;
          CHECK(where + (same ? "" : ": stored bytes differ from rank 0's") == where);
        }
      }
      // The run must have trained: the params moved and every step clipped.
      const RankRun& g = gpu[k][0];
      CHECK(g.snaps.front().bytes != g.snaps.back().bytes);
      for (const StepReport& rep : g.reports)
        if (!rep.skipped) CHECK(rep.clip_coef < 1.0f);
    }
  }
}

void check_optimizer(fpg::optim::OptimizerKind kind) {
  std::vector<Case> cases;
  for (const char* m : kFp8Modes) cases.push_back(make_case(kind, m, false));
  cases.push_back(make_case(kind, "none", true));
  cases.push_back(make_case(kind, "tensorwise", true));
  check_cases(cases);
}

}  // namespace

TEST_CASE("device pipeline equals the CPU pipeline bit for bit: adamw", "[device-pipeline]") {
  check_optimizer(fpg::optim::OptimizerKind::adamw);
}

TEST_CASE("device pipeline equals the CPU pipeline bit for bit: adam", "[device-pipeline]") {
  check_optimizer(fpg::optim::OptimizerKind::adam);
}

TEST_CASE("device pipeline equals the CPU pipeline bit for bit: lion", "[device-pipeline]") {
  check_optimizer(fpg::optim::OptimizerKind::lion);
}

// `--compute bf16`'s pipeline: bf16 params read where the gather leaves them, their copy-back fused
// into the optimizer's pass, fp32-kept and FP8 params decoded to bf16. Same state and bytes as the CPU.
TEST_CASE("device pipeline with bf16 param views equals the CPU pipeline bit for bit", "[device-pipeline][bf16]") {
  std::vector<Case> cases;
  for (const auto kind : {fpg::optim::OptimizerKind::adamw, fpg::optim::OptimizerKind::lion}) {
    for (const char* m : kFp8Modes) cases.push_back(make_case(kind, m, false));
    cases.push_back(make_case(kind, "none", true));
  }
  cases.push_back(make_case(fpg::optim::OptimizerKind::adam, "tensorwise", true));
  for (Case& c : cases) {
    c.bf16_view = true;
    c.name += "/bf16-view";
  }
  check_cases(cases);
}

TEST_CASE("device pipeline skips a non-finite step as the CPU does", "[device-pipeline]") {
  std::vector<Case> cases;
  Case a = make_case(fpg::optim::OptimizerKind::adamw, "none", false);
  a.name += "/nan";
  a.bad_step = 1;
  a.bad_value = std::numeric_limits<float>::quiet_NaN();
  cases.push_back(a);
  Case b = make_case(fpg::optim::OptimizerKind::lion, "delayed", false);
  b.name += "/inf";
  b.bad_step = 1;
  b.bad_value = std::numeric_limits<float>::infinity();
  cases.push_back(b);
  for (int dp : dps()) {
    const Runs cpu = run_cpu(cases, dp);
    const Runs gpu = run_gpu(cases, dp);
    for (size_t k = 0; k < cases.size(); ++k) {
      for (int r = 0; r < dp; ++r) {
        const std::string where = cases[k].name + " dp=" + std::to_string(dp) + " rank " + std::to_string(r);
        const RankRun& g = gpu[k][static_cast<size_t>(r)];
        CHECK(where + ": " + diff_run(cpu[k][static_cast<size_t>(r)], g) == where + ": ");
        REQUIRE(g.reports.size() == static_cast<size_t>(kSteps));
        CHECK(g.reports[1].skipped);
        CHECK(!std::isfinite(g.reports[1].grad_norm));
        CHECK(g.reports[1].optimizer_step == 1);
        CHECK(g.reports[2].optimizer_step == 2);
        // Nothing moved in the skipped step.
        CHECK(g.snaps[2].bytes == g.snaps[1].bytes);
        CHECK(diff_state(g.snaps[2].state, g.snaps[1].state) == "");
      }
    }
  }
}

TEST_CASE("device pipeline refuses host communicators", "[device-pipeline]") {
  const ModelSpec spec = awkward_spec();
  const auto init = [&](uint32_t p, float* v) { init_values(p, v, spec.params[p].numel()); };
  PipelineConfig cfg;
  REQUIRE_THROWS_AS(fpg::comm::make_communicator_group("threads", 1)->run([&](Communicator& comm) {
    fpg::device::DeviceRankPipeline pipe(spec, cfg, comm, init);
  }),
                    fpg::UsageError);
}
