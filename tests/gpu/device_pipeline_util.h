// Shared by the device-vs-CPU pipeline tests (device_pipeline_test.cpp, device_layer_wise_test.cpp):
// the same spec, config and deterministic gradients on a threads group (CPU RankPipeline) and an nccl
// group (DeviceRankPipeline) of the same dp, K steps, every rank's snapshots (state, stored bytes) and
// StepReports, and their bitwise comparison (NaN equals NaN, kernels/README.md).
//
// The gradient is a host function of (step, param, element, rank) plus (Case::coupled) a multiple of
// the param's decoded value, so params() is checked too: the GPU grad_fn downloads params, computes on
// the host with the same code and uploads the grads. Case::bf16_view runs the device pipeline with
// ParamView::bf16 (`--compute bf16`: bf16 params read in place, the copy-back fused into the
// optimizer) and couples the gradient to bf16(decoded value) on both sides, so bf16_params() is
// checked against the CPU's decode rounded to bf16, and the state and stored bytes bitwise as ever.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/group.h"
#include "core/float_codec.h"
#include "comm/nccl_backend.h"
#include "pipeline/device/device_rank_pipeline.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"
#include "model/model_spec.h"
#include "model/presets.h"
#include "pipeline/rank_pipeline.h"
#include "unit/pipeline_test_util.h"

namespace fpg::test::devcmp {

using fpg::comm::Communicator;
using fpg::model::ModelSpec;
using fpg::pipeline::PipelineConfig;
using fpg::pipeline::RankState;
using fpg::pipeline::StepReport;

using fpg::comm::Communicator;
using fpg::model::ModelSpec;
using fpg::pipeline::PipelineConfig;
using fpg::pipeline::RankState;
using fpg::pipeline::StepReport;

constexpr int kSteps = 3;

inline uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// In [-1, 1), 24 random bits.
inline float unit(uint64_t key) { return static_cast<float>(mix(key) >> 8) * 0x1p-23f - 1.0f; }

// Awkward sizes: fc1 [144, 40], fc2 [40, 72], input [40, 20], output [12, 40] (blockwise 128x128
// grids with partial blocks, rows of 40 split by shard boundaries).
inline ModelSpec awkward_spec() {
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
  // The gradient adds 0.25 x the param's decoded value (so params() is checked). Off for Muon, whose
  // update is only within tolerance of the CPU's: the gradients then stay identical step after step.
  bool coupled = true;
  bool bf16_view = false;  // the device pipeline reads ParamView::bf16 (see above)
};

inline Case make_case(fpg::optim::OptimizerKind kind, const std::string& fp8, bool keep_fp32) {
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
inline void init_values(uint32_t param, float* out, uint64_t n) {
  for (uint64_t e = 0; e < n; ++e) out[e] = 0.5f * unit((uint64_t{param} << 40) ^ (e * 2654435761ull) ^ 0x1234);
}

// Rank `rank`'s gradient of step `step` for param p (host), given its decoded values.
inline void fill_grad(const Case& c, int step, uint32_t rank, uint32_t p, const float* values, float* g) {
  const uint64_t n = c.spec.params[p].numel();
  const float scale = std::ldexp(1.0f, static_cast<int>(p % 5) - 2);
  for (uint64_t e = 0; e < n; ++e) {
    const uint64_t key = ((((uint64_t(step) * 97 + p) * 8 + rank) << 32) ^ e) + 0x9e3779b97f4a7c15ull;
    g[e] = c.coupled ? scale * unit(key) + 0.25f * values[e] : scale * unit(key);
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

inline Runs run_cpu(const std::vector<Case>& cases, int dp) {
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
              std::vector<float> rounded;
              for (uint32_t p = 0; p < params.size(); ++p) {
                const float* v = params[p];
                if (c.bf16_view) {
                  rounded.resize(c.spec.params[p].numel());
                  for (size_t e = 0; e < rounded.size(); ++e) rounded[e] = fpg::float_from_bf16(fpg::bf16_from_float(v[e]));
                  v = rounded.data();
                }
                fill_grad(c, s, r, p, v, grads[p]);
              }
            },
            3 * static_cast<uint64_t>(dp)));
        out.snaps.push_back(snap_of(pipe, pipe.state()));
      }
    }
  });
  return runs;
}

inline Runs run_gpu(const std::vector<Case>& cases, int dp) {
  Runs runs(cases.size(), std::vector<RankRun>(static_cast<size_t>(dp)));
  fpg::comm::make_nccl_group(dp)->run([&](Communicator& comm) {
    const uint32_t r = static_cast<uint32_t>(comm.rank());
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      RankRun& out = runs[k][r];
      fpg::device::DeviceRankPipeline pipe(
          c.spec, c.cfg, comm, [&](uint32_t p, float* v) { init_values(p, v, c.spec.params[p].numel()); }, {},
          c.bf16_view ? fpg::device::ParamView::bf16 : fpg::device::ParamView::fp32);
      out.snaps.push_back(snap_of(pipe, pipe.download_state()));
      for (int s = 0; s < kSteps; ++s) {
        out.reports.push_back(pipe.step(
            [&](const std::vector<const float*>& params, const std::vector<float*>& grads) {
              const cudaStream_t stream = pipe.stream();
              const size_t count = c.spec.params.size();
              if (params.size() != (c.bf16_view ? 0 : count))  // a bf16 grad_fn reads bf16_params()
                throw std::runtime_error("grad_fn got " + std::to_string(params.size()) + " fp32 params");
              // Copies on the rank's (non-blocking) stream, so the step's work is ordered after them.
              std::vector<std::vector<float>> g(count);
              std::vector<float> v;
              std::vector<uint16_t> bits;
              for (uint32_t p = 0; p < count; ++p) {
                const uint64_t n = c.spec.params[p].numel();
                v.resize(n);
                g[p].resize(n);
                if (c.bf16_view) {
                  bits.resize(n);
                  FPG_CUDA_CHECK(cudaMemcpyAsync(bits.data(), pipe.bf16_params()[p], n * 2, cudaMemcpyDeviceToHost,
                                                 stream));
                  FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
                  for (uint64_t e = 0; e < n; ++e) v[e] = fpg::float_from_bf16(bits[e]);
                } else {
                  FPG_CUDA_CHECK(cudaMemcpyAsync(v.data(), params[p], n * 4, cudaMemcpyDeviceToHost, stream));
                  FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
                }
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

inline bool same_float_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (a != a && b != b);
}

inline bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_float_bits(a[i], b[i])) return false;
  return true;
}

// "" when equal, else the first difference.
inline std::string diff_part(const fpg::pipeline::OptimizerState& a, const fpg::pipeline::OptimizerState& b) {
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

inline std::string diff_state(const RankState& a, const RankState& b) {
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

inline std::string diff_report(const StepReport& a, const StepReport& b) {
  const bool norm_same = a.grad_norm == b.grad_norm || (a.grad_norm != a.grad_norm && b.grad_norm != b.grad_norm);
  if (!norm_same) return "grad_norm " + std::to_string(a.grad_norm) + " vs " + std::to_string(b.grad_norm);
  if (!same_float_bits(a.clip_coef, b.clip_coef)) return "clip_coef";
  if (a.skipped != b.skipped) return "skipped";
  if (a.optimizer_step != b.optimizer_step) return "optimizer_step";
  return "";
}

// The whole comparison of one case on one rank: "" when equal.
inline std::string diff_run(const RankRun& cpu, const RankRun& gpu) {
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

inline std::vector<int> dps() {
  std::vector<int> out{1};
  if (fpg::cuda::device_count() >= 2) out.push_back(2);
  return out;
}

}  // namespace fpg::test::devcmp
