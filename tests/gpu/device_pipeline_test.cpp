// The device bucketed pipeline (lib/device/device_rank_pipeline.h) against the CPU RankPipeline:
// the same spec, config and deterministic gradients on a threads group (CPU) and an nccl group (GPU)
// of the same dp, K steps, then every rank's state (masters, moments, step, FP8 scale state), every
// param's stored bytes and every StepReport's norm / clip / skip are compared bit for bit (NaN equals
// NaN, kernels/README.md). Optimizers adamw, adam, lion × params bf16 (+ fp32-kept matrices and
// norms), FP8 tensorwise, delayed, blockwise 128x128 and 1x128, MXFP8 rowwise+columnwise; awkward
// sizes (fc1 144x40, blockwise grids with partial blocks) and small buckets (fragments cut rows and
// blocks). DP=1 always, DP=2 with two GPUs (NCCL's 2-rank sum equals the threads backend's bitwise);
// there every rank's stored bytes must also be identical (DESIGN.md invariant 1).
//
// The gradient is a host function of (step, param, element, rank) plus a multiple of the param's
// decoded value, so params() is checked too: the GPU grad_fn downloads params, computes on the host
// with the same code and uploads the grads.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "catch.h"
#include "comm/group.h"
#include "comm/nccl_backend.h"
#include "device/device_rank_pipeline.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"
#include "model/model_spec.h"
#include "model/presets.h"
#include "pipeline/rank_pipeline.h"
#include "unit/pipeline_test_util.h"

namespace {

using fpg::comm::Communicator;
using fpg::model::ModelSpec;
using fpg::pipeline::PipelineConfig;
using fpg::pipeline::RankState;
using fpg::pipeline::StepReport;

constexpr int kSteps = 3;

uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// In [-1, 1), 24 random bits.
float unit(uint64_t key) { return static_cast<float>(mix(key) >> 8) * 0x1p-23f - 1.0f; }

// Awkward sizes: fc1 [144, 40], fc2 [40, 72], input [40, 20], output [12, 40] (blockwise 128x128
// grids with partial blocks, rows of 40 split by shard boundaries).
ModelSpec awkward_spec() {
  fpg::model::NetworkDims d;
  d.input = 20;
  d.hidden = 40;
  d.ffn = 72;
  d.layers = 2;
  d.output = 12;
  return fpg::model::network_spec("awk", d);
}

struct Case {
  std::string name;
  ModelSpec spec;
  PipelineConfig cfg;
  int bad_step = -1;  // this step's gradient holds a non-finite value (the step is skipped)
  float bad_value = 0;
};

Case make_case(fpg::optim::OptimizerKind kind, const std::string& fp8, bool keep_fp32) {
  Case c;
  c.name = std::string(fpg::optim::optimizer_name(kind)) + "/" + fp8 + (keep_fp32 ? "/keep-fp32" : "");
  c.spec = fp8.rfind("mxfp8", 0) == 0 ? fpg::pipeline::test::spec32() : awkward_spec();
  // A matrix and a norm kept in fp32: an F32 buffer next to the bf16 / FP8 ones.
  if (keep_fp32) fpg::model::mark_keep_in_fp32(c.spec, "blocks\\.1\\.fc2|final_norm");
  c.cfg.optimizer = kind;
  c.cfg.lr = 1e-2;
  c.cfg.weight_decay = 0.05;
  c.cfg.clip_grad = 1.0;  // the gradients' norm is far above: every step clips
  c.cfg.bucket_size = 1500;
  fpg::pipeline::test::set_fp8(c.cfg, fp8);
  return c;
}

// Deterministic initial values.
void init_values(uint32_t param, float* out, uint64_t n) {
  for (uint64_t e = 0; e < n; ++e) out[e] = 0.5f * unit((uint64_t{param} << 40) ^ (e * 2654435761ull) ^ 0x1234);
}

// Rank `rank`'s gradient of step `step` for param p (host), given its decoded values.
void fill_grad(const Case& c, int step, uint32_t rank, uint32_t p, const float* values, float* g) {
  const uint64_t n = c.spec.params[p].numel();
  const float scale = std::ldexp(1.0f, static_cast<int>(p % 5) - 2);
  for (uint64_t e = 0; e < n; ++e) {
    const uint64_t key = ((((uint64_t(step) * 97 + p) * 8 + rank) << 32) ^ e) + 0x9e3779b97f4a7c15ull;
    g[e] = scale * unit(key) + 0.25f * values[e];
  }
  if (step == c.bad_step && rank == 0 && p == 1 && n > 3) g[3] = c.bad_value;
}

struct Snap {
  RankState state;
  std::vector<std::vector<uint8_t>> bytes;  // per param
};

struct RankRun {
  std::vector<Snap> snaps;            // after construction, then after each step
  std::vector<StepReport> reports;    // per step
};

// cases × ranks.
using Runs = std::vector<std::vector<RankRun>>;

template <class Pipeline>
Snap snap_of(const Pipeline& p, const RankState& st) {
  Snap s;
  s.state = st;
  for (uint32_t i = 0; i < p.spec().params.size(); ++i) s.bytes.push_back(p.stored_bytes(i));
  return s;
}

Runs run_cpu(const std::vector<Case>& cases, int dp) {
  Runs runs(cases.size(), std::vector<RankRun>(static_cast<size_t>(dp)));
  fpg::comm::make_communicator_group("threads", dp)->run([&](Communicator& comm) {
    const uint32_t r = static_cast<uint32_t>(comm.rank());
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      RankRun& out = runs[k][r];
      fpg::pipeline::RankPipeline pipe(c.spec, c.cfg, comm, [&](uint32_t p, float* v) {
        init_values(p, v, c.spec.params[p].numel());
      });
      out.snaps.push_back(snap_of(pipe, pipe.state()));
      for (int s = 0; s < kSteps; ++s) {
        out.reports.push_back(pipe.step(
            [&](const std::vector<const float*>& params, const std::vector<float*>& grads) {
              for (uint32_t p = 0; p < params.size(); ++p) fill_grad(c, s, r, p, params[p], grads[p]);
            },
            3 * static_cast<uint64_t>(dp)));
        out.snaps.push_back(snap_of(pipe, pipe.state()));
      }
    }
  });
  return runs;
}

Runs run_gpu(const std::vector<Case>& cases, int dp) {
  Runs runs(cases.size(), std::vector<RankRun>(static_cast<size_t>(dp)));
  fpg::comm::make_nccl_group(dp)->run([&](Communicator& comm) {
    const uint32_t r = static_cast<uint32_t>(comm.rank());
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      RankRun& out = runs[k][r];
      fpg::device::DeviceRankPipeline pipe(c.spec, c.cfg, comm, [&](uint32_t p, float* v) {
        init_values(p, v, c.spec.params[p].numel());
      });
      out.snaps.push_back(snap_of(pipe, pipe.download_state()));
      for (int s = 0; s < kSteps; ++s) {
        out.reports.push_back(pipe.step(
            [&](const std::vector<const float*>& params, const std::vector<float*>& grads, cudaStream_t stream) {
              // Copies on the rank's (non-blocking) stream, so the step's work is ordered after them.
              std::vector<std::vector<float>> g(params.size());
              std::vector<float> v;
              for (uint32_t p = 0; p < params.size(); ++p) {
                const uint64_t n = c.spec.params[p].numel();
                v.resize(n);
                g[p].resize(n);
                FPG_CUDA_CHECK(cudaMemcpyAsync(v.data(), params[p], n * 4, cudaMemcpyDeviceToHost, stream));
                FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
                fill_grad(c, s, r, p, v.data(), g[p].data());
                FPG_CUDA_CHECK(cudaMemcpyAsync(grads[p], g[p].data(), n * 4, cudaMemcpyHostToDevice, stream));
              }
              FPG_CUDA_CHECK(cudaStreamSynchronize(stream));  // g goes out of scope here
            },
            3 * static_cast<uint64_t>(dp)));
        out.snaps.push_back(snap_of(pipe, pipe.download_state()));
      }
    }
  });
  return runs;
}

bool same_float_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (a != a && b != b);
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_float_bits(a[i], b[i])) return false;
  return true;
}

// "" when equal, else the first difference.
std::string diff_part(const fpg::pipeline::OptimizerState& a, const fpg::pipeline::OptimizerState& b) {
  if (a.kind != b.kind) return "kind";
  if (a.step != b.step) return "step " + std::to_string(a.step) + " vs " + std::to_string(b.step);
  if (a.fragments.size() != b.fragments.size()) return "fragment count";
  for (size_t i = 0; i < a.fragments.size(); ++i) {
    const auto &x = a.fragments[i], &y = b.fragments[i];
    if (x.param != y.param || x.param_range.begin != y.param_range.begin || x.param_range.end != y.param_range.end ||
        x.param_numel != y.param_numel || x.offset != y.offset)
      return "fragment " + std::to_string(i);
  }
  if (a.by_param != b.by_param) return "by_param";
  if (!same_floats(a.master, b.master)) return "master";
  if (!same_floats(a.exp_avg, b.exp_avg)) return "exp_avg";
  if (!same_floats(a.exp_avg_sq, b.exp_avg_sq)) return "exp_avg_sq";
  if (!same_floats(a.momentum, b.momentum)) return "momentum";
  return "";
}

std::string diff_state(const RankState& a, const RankState& b) {
  if (a.rank != b.rank || a.dp != b.dp) return "rank/dp";
  std::string d = diff_part(a.bucketed, b.bucketed);
  if (!d.empty()) return "bucketed " + d;
  d = diff_part(a.layer_wise, b.layer_wise);
  if (!d.empty()) return "layer_wise " + d;
  if (a.fp8.size() != b.fp8.size()) return "fp8 count";
  for (size_t i = 0; i < a.fp8.size(); ++i) {
    const auto &x = a.fp8[i], &y = b.fp8[i];
    const std::string t = "fp8[" + std::to_string(i) + "] ";
    if (x.param != y.param) return t + "param";
    if (!same_floats(x.scales.scale, y.scales.scale)) return t + "scale";
    if (!same_floats(x.scales.scale_inv, y.scales.scale_inv)) return t + "scale_inv";
    if (x.scales.e8m0 != y.scales.e8m0) return t + "e8m0";
    if (x.scales.e8m0_col != y.scales.e8m0_col) return t + "e8m0_col";
    if (!same_floats(x.delayed.amax_history, y.delayed.amax_history)) return t + "amax_history";
    if (!same_float_bits(x.delayed.scale, y.delayed.scale)) return t + "delayed scale";
    if (!same_float_bits(x.delayed.scale_inv, y.delayed.scale_inv)) return t + "delayed scale_inv";
  }
  return "";
}

std::string diff_report(const StepReport& a, const StepReport& b) {
  const bool norm_same = a.grad_norm == b.grad_norm || (a.grad_norm != a.grad_norm && b.grad_norm != b.grad_norm);
  if (!norm_same) return "grad_norm " + std::to_string(a.grad_norm) + " vs " + std::to_string(b.grad_norm);
  if (!same_float_bits(a.clip_coef, b.clip_coef)) return "clip_coef";
  if (a.skipped != b.skipped) return "skipped";
  if (a.optimizer_step != b.optimizer_step) return "optimizer_step";
  return "";
}

// The whole comparison of one case on one rank: "" when equal.
std::string diff_run(const RankRun& cpu, const RankRun& gpu) {
  if (cpu.snaps.size() != gpu.snaps.size() || cpu.reports.size() != gpu.reports.size()) return "step count";
  for (size_t s = 0; s < cpu.snaps.size(); ++s) {
    const std::string at = "after step " + std::to_string(s) + ": ";
    std::string d = diff_state(cpu.snaps[s].state, gpu.snaps[s].state);
    if (!d.empty()) return at + d;
    for (size_t p = 0; p < cpu.snaps[s].bytes.size(); ++p)
      if (cpu.snaps[s].bytes[p] != gpu.snaps[s].bytes[p]) return at + "stored bytes of param " + std::to_string(p);
    if (s > 0) {
      d = diff_report(cpu.reports[s - 1], gpu.reports[s - 1]);
      if (!d.empty()) return at + d;
    }
  }
  return "";
}

std::vector<int> dps() {
  std::vector<int> out{1};
  if (fpg::cuda::device_count() >= 2) out.push_back(2);
  return out;
}

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

TEST_CASE("device pipeline refuses host communicators and the layer-wise optimizer", "[device-pipeline]") {
  const ModelSpec spec = awkward_spec();
  const auto init = [&](uint32_t p, float* v) { init_values(p, v, spec.params[p].numel()); };
  PipelineConfig cfg;
  REQUIRE_THROWS_AS(fpg::comm::make_communicator_group("threads", 1)->run([&](Communicator& comm) {
    fpg::device::DeviceRankPipeline pipe(spec, cfg, comm, init);
  }),
                    fpg::UsageError);
  cfg.dist_opt = fpg::pipeline::DistOpt::layerwise;
  REQUIRE_THROWS_AS(fpg::comm::make_nccl_group(1)->run([&](Communicator& comm) {
    fpg::device::DeviceRankPipeline pipe(spec, cfg, comm, init);
  }),
                    fpg::UsageError);
}
