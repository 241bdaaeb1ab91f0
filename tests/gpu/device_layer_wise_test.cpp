// The device layer-wise pipeline (--dist-opt layerwise: lib/pipeline/device/device_layer_wise_part.h chained
// with the bucketed part) against the CPU RankPipeline, with device_pipeline_util.h's runs (threads
// group vs nccl group, the same deterministic gradients, K steps):
//   - adamw / lion under layerwise, params bf16, FP8 tensorwise / blockwise (compact gather), MXFP8
//     rowwise+columnwise (staged: re-quantized from the gathered bf16), the staged path for tensorwise
//     too (compact gather off), fp32-kept matrices routed to the layer-wise part (the fp32 gather):
//     everything bit for bit (masters, moments, step, FP8 scales, stored bytes, norms, clip);
//   - muon (bf16 Newton-Schulz on cuBLAS) with bf16 and FP8 params: the gradient does not depend on
//     the params (Case::coupled off), so the grads, norms, clip coefficients and Muon momentum are
//     bitwise, the scalar optimizer's masters/moments and the non-Muon params' stored bytes and FP8
//     state bitwise, and every Muon-updated master within kernels/README.md's tolerance (5% of the
//     CPU's update, as a norm over the matrix);
//   - a rank that owns no matrix (a spec with one matrix at dp 2), both optimizers;
//   - delayed FP8 scaling (history of 4, algo max: set_fp8), compact and staged, adamw / lion bitwise
//     (amax histories, delayed and cast scales included), Muon and the empty rank as above; for Muon
//     the matrices' amax histories follow the CPU's within 1% (they are amaxes of the masters).
// DP=1 always, DP=2 with two GPUs; there every rank's stored bytes must be identical (invariant 1).
#include <cmath>
#include <string>
#include <vector>

#include "catch.h"
#include "device_pipeline_util.h"
#include "pipeline/fp8_params.h"
#include "pipeline/pipeline_layout.h"

namespace {

using namespace fpg::test::devcmp;
using fpg::optim::OptimizerKind;

Case layer_wise_case(OptimizerKind kind, const std::string& fp8, bool keep_fp32 = false) {
  Case c = make_case(kind, fp8, keep_fp32);
  c.name = "layerwise/" + c.name;
  c.cfg.dist_opt = fpg::pipeline::DistOpt::layerwise;
  c.coupled = kind != OptimizerKind::muon;
  return c;
}

// One Muon-eligible matrix (48 x 40) and two vectors: at dp 2 rank 1 owns no matrix.
Case one_matrix_case(OptimizerKind kind, const std::string& fp8) {
  Case c = layer_wise_case(kind, fp8);
  c.name += "/one-matrix";
  ModelSpec s;
  s.name = "one";
  fpg::model::Param w;
  w.name = "w";
  w.shape = {48, 40};
  fpg::model::Param b = w;
  b.name = "b";
  b.shape = {40};
  b.role = fpg::model::Role::vector;
  fpg::model::Param g = b;
  g.name = "g";
  g.shape = {48};
  s.params = {w, b, g};
  c.spec = s;
  return c;
}

// Params the layer-wise part holds (whole owned matrices).
std::vector<bool> layer_wise_params(const Case& c, int dp) {
  const fpg::pipeline::PipelineLayout l = fpg::pipeline::build_pipeline_layout(c.spec, c.cfg, static_cast<uint32_t>(dp));
  std::vector<bool> out(c.spec.params.size(), false);
  for (uint32_t p = 0; p < out.size(); ++p) out[p] = l.layer_wise->owner(p).has_value();
  return out;
}

double norm2(const float* a, const float* b, uint64_t n) {  // ||a - b||
  double s = 0;
  for (uint64_t i = 0; i < n; ++i) s += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
  return std::sqrt(s);
}

// Delayed amax histories of a Muon-updated matrix: the same length, each entry within 1% of the CPU's
// (both 0 where nothing was recorded).
std::string diff_history(const std::vector<float>& cpu, const std::vector<float>& gpu) {
  if (cpu.size() != gpu.size()) return "amax_history length";
  for (size_t k = 0; k < cpu.size(); ++k)
    if (!(std::fabs(cpu[k] - gpu[k]) <= 0.01f * std::fabs(cpu[k]))) return "amax_history[" + std::to_string(k) + "]";
  return "";
}

// The Muon comparison of one rank's run: "" when within the contract.
std::string diff_muon_run(const RankRun& cpu, const RankRun& gpu, const std::vector<bool>& lw) {
  if (cpu.snaps.size() != gpu.snaps.size() || cpu.reports.size() != gpu.reports.size()) return "step count";
  for (size_t s = 0; s < cpu.snaps.size(); ++s) {
    const std::string at = "after step " + std::to_string(s) + ": ";
    const RankState &a = cpu.snaps[s].state, &b = gpu.snaps[s].state;
    std::string d = diff_part(a.bucketed, b.bucketed);
    if (!d.empty()) return at + "bucketed " + d;
    const fpg::pipeline::OptimizerState &x = a.layer_wise, &y = b.layer_wise;
    if (x.kind != y.kind || x.step != y.step || x.by_param != y.by_param) return at + "layer_wise kind/step/map";
    if (x.fragments.size() != y.fragments.size()) return at + "layer_wise fragments";
    if (!same_floats(x.momentum, y.momentum)) return at + "Muon momentum";
    if (x.master.size() != y.master.size()) return at + "layer_wise master size";
    const fpg::pipeline::OptimizerState& x0 = cpu.snaps.front().state.layer_wise;
    for (const auto& f : x.fragments) {
      const uint64_t n = f.param_range.size();
      const double moved = norm2(x.master.data() + f.offset, x0.master.data() + f.offset, n);
      const double err = norm2(x.master.data() + f.offset, y.master.data() + f.offset, n);
      if (!(err <= 0.05 * moved)) {
        return at + "Muon master of param " + std::to_string(f.param) + ": |gpu - cpu| " + std::to_string(err) +
               " > 5% of the update " + std::to_string(moved);
      }
      if (s > 0 && !(moved > 0)) return at + "Muon master of param " + std::to_string(f.param) + " did not move";
    }
    if (a.fp8.size() != b.fp8.size()) return at + "fp8 count";
    for (size_t i = 0; i < a.fp8.size(); ++i) {
      if (lw[a.fp8[i].param]) {  // quantized from a Muon master: follows it within tolerance
        d = diff_history(a.fp8[i].delayed.amax_history, b.fp8[i].delayed.amax_history);
        if (!d.empty()) return at + "fp8[" + std::to_string(i) + "] " + d;
        continue;
      }
      RankState ai, bi;
      ai.fp8 = {a.fp8[i]};
      bi.fp8 = {b.fp8[i]};
      d = diff_state(ai, bi);
      if (!d.empty()) return at + d;
    }
    for (size_t p = 0; p < cpu.snaps[s].bytes.size(); ++p)
      if (!lw[p] && cpu.snaps[s].bytes[p] != gpu.snaps[s].bytes[p])
        return at + "stored bytes of non-Muon param " + std::to_string(p);
    if (s > 0) {
      d = diff_report(cpu.reports[s - 1], gpu.reports[s - 1]);
      if (!d.empty()) return at + d;
    }
  }
  return "";
}

void check_cases(const std::vector<Case>& cases) {
  for (int dp : dps()) {
    const Runs cpu = run_cpu(cases, dp);
    const Runs gpu = run_gpu(cases, dp);
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      const std::vector<bool> lw = layer_wise_params(c, dp);
      for (int r = 0; r < dp; ++r) {
        const std::string where = c.name + " dp=" + std::to_string(dp) + " rank " + std::to_string(r);
        const RankRun &cr = cpu[k][static_cast<size_t>(r)], &gr = gpu[k][static_cast<size_t>(r)];
        const std::string d = c.cfg.optimizer == OptimizerKind::muon ? diff_muon_run(cr, gr, lw) : diff_run(cr, gr);
        CHECK(where + ": " + d == where + ": ");
        // Invariant 1: every rank holds the same params and FP8 state after every step.
        for (size_t s = 0; r > 0 && s < gr.snaps.size(); ++s) {
          const bool same = gr.snaps[s].bytes == gpu[k][0].snaps[s].bytes;
          CHECK(where + (same ? "" : ": stored bytes differ from rank 0's") == where);
        }
      }
      // The run must have trained through the layer-wise part: its params moved, every step clipped.
      const RankRun& g = gpu[k][0];
      for (uint32_t p = 0; p < lw.size(); ++p)
        if (lw[p]) CHECK(g.snaps.front().bytes[p] != g.snaps.back().bytes[p]);
      for (const StepReport& rep : g.reports) CHECK(rep.clip_coef < 1.0f);
      // Delayed: the matrices' histories hold recorded amaxes and their scales left the initial 1.
      if (!fpg::pipeline::is_delayed(c.cfg.fp8)) continue;
      for (const fpg::pipeline::Fp8ParamState& f : g.snaps.back().state.fp8) {
        if (!lw[f.param]) continue;
        bool recorded = false;
        for (float a : f.delayed.amax_history) recorded |= a > 0.0f;
        CHECK((c.name + (recorded ? "" : ": nothing recorded")) == c.name);
        CHECK(f.delayed.scale != 1.0f);
      }
    }
  }
}

}  // namespace

TEST_CASE("device layer-wise pipeline equals the CPU bit for bit: adamw", "[device-layerwise]") {
  std::vector<Case> cases;
  for (const char* m : {"none", "tensorwise", "blockwise", "blockwise-1x128", "mxfp8", "mxfp8-row"})
    cases.push_back(layer_wise_case(OptimizerKind::adamw, m));
  Case staged = layer_wise_case(OptimizerKind::adamw, "tensorwise");
  staged.name += "/staged";
  staged.cfg.compact_fp8_gather = false;
  cases.push_back(staged);
  Case f32 = layer_wise_case(OptimizerKind::adamw, "none", true);
  f32.name += "/fp32-matrices";
  f32.cfg.fp32_matrices = true;  // the fp32-kept fc2 goes to the layer-wise part: the fp32 gather
  cases.push_back(f32);
  cases.push_back(layer_wise_case(OptimizerKind::lion, "blockwise"));
  check_cases(cases);
}

// `--compute bf16`: the matrices decoded (bf16 / FP8 / fp32 transports) and rounded into bf16 views,
// the scalar layout's bf16 params read in place with the copy-back fused into the optimizer.
TEST_CASE("device layer-wise pipeline with bf16 param views equals the CPU bit for bit", "[device-layerwise][bf16]") {
  std::vector<Case> cases;
  for (const char* m : {"none", "tensorwise", "mxfp8"}) cases.push_back(layer_wise_case(OptimizerKind::adamw, m));
  Case f32 = layer_wise_case(OptimizerKind::adamw, "none", true);
  f32.name += "/fp32-matrices";
  f32.cfg.fp32_matrices = true;
  cases.push_back(f32);
  cases.push_back(layer_wise_case(OptimizerKind::muon, "blockwise"));
  for (Case& c : cases) {
    c.bf16_view = true;
    c.name += "/bf16-view";
  }
  check_cases(cases);
}

TEST_CASE("device layer-wise Muon equals the CPU within the Muon tolerance", "[device-layerwise]") {
  std::vector<Case> cases;
  for (const char* m : {"none", "tensorwise", "blockwise", "mxfp8", "mxfp8-row"})
    cases.push_back(layer_wise_case(OptimizerKind::muon, m));
  Case lion = layer_wise_case(OptimizerKind::muon, "none", true);
  lion.name += "/scalar-lion";
  lion.cfg.scalar_optimizer = fpg::optim::ScalarOptimizer::lion;
  cases.push_back(lion);
  check_cases(cases);
}

TEST_CASE("device layer-wise pipeline with delayed FP8 scaling equals the CPU", "[device-layerwise]") {
  std::vector<Case> cases;
  for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::lion, OptimizerKind::muon}) {
    cases.push_back(layer_wise_case(kind, "delayed"));
    Case staged = layer_wise_case(kind, "delayed");
    staged.name += "/staged";
    staged.cfg.compact_fp8_gather = false;  // re-quantized from the gathered bf16 by every rank
    cases.push_back(staged);
  }
  cases.push_back(one_matrix_case(OptimizerKind::adamw, "delayed"));
  cases.push_back(one_matrix_case(OptimizerKind::muon, "delayed"));
  check_cases(cases);
}

TEST_CASE("device layer-wise pipeline with a rank that owns no matrix", "[device-layerwise]") {
  check_cases({one_matrix_case(OptimizerKind::adamw, "tensorwise"), one_matrix_case(OptimizerKind::adamw, "none"),
               one_matrix_case(OptimizerKind::muon, "none"), one_matrix_case(OptimizerKind::muon, "blockwise")});
}
