// lib/ARCHITECTURE.md invariants 1-3 for both pipelines, every optimizer and every FP8 recipe:
//   1. after every step all ranks hold byte-identical params (data, columnwise data, scales, delayed
//      histories);
//   2. the sharded FP8 copy-back equals full-tensor quantization of bf16(master), bit for bit;
//   3. DP=N equals DP=1 accumulating the same N micro-batches, bitwise: masters, optimizer states,
//      params and losses, with clipping active, for N in {2, 3, 4, 8} (and the DP=1 runs are the
//      N = 1 case), small buckets (params at buckets' ends, fragments across rank boundaries,
//      ranks owning nothing in a bucket) and, layer-wise, empty ranks.
#include <cstdio>
#include <string>
#include <vector>

#include "catch.h"
#include "fp8/quantize.h"
#include "pipeline/fp8_params.h"
#include "pipeline_test_util.h"

using namespace fpg;
using namespace fpg::pipeline;
using namespace fpg::pipeline::test;

namespace {

app::train::TrainOptions base_options(DistOpt d, optim::OptimizerKind opt, const std::string& fp8, uint32_t dp,
                                 uint64_t accumulation, uint64_t steps) {
  app::train::TrainOptions o;
  o.spec = spec32();
  o.dp = dp;
  o.accumulation = accumulation;
  o.steps = steps;
  o.micro_batch = 8;
  o.seed = 7;
  PipelineConfig& c = o.pipeline;
  c.dist_opt = d;
  c.optimizer = opt;
  c.lr = opt == optim::OptimizerKind::lion ? 3e-4 : 2e-3;
  c.clip_grad = 0.05;  // small enough that every step clips
  c.bucket_size = 3000;
  set_fp8(c, fp8);
  return o;
}

void check_invariant1(const Run& r, uint32_t dp) {
  for (size_t step = 0; step < r.snaps.size(); ++step)
    for (uint32_t rank = 1; rank < dp; ++rank)
      for (size_t p = 0; p < r.snaps[step][0].bytes.size(); ++p) {
        INFO("step " << step << " rank " << rank << " param " << p);
        REQUIRE(r.snaps[step][rank].bytes[p] == r.snaps[step][0].bytes[p]);
      }
}

// The stored bytes of an FP8 param begin with data, columnwise data and the scale grids; compare
// them with quantize_tensor of the whole bf16(master).
void check_invariant2(const Run& r, const app::train::TrainOptions& o) {
  if (!o.pipeline.fp8.enabled) return;
  const std::vector<RankSnap>& last = r.snaps.back();
  const FullState full = full_state(last, o.spec);
  const auto& master = full.arrays.at("master");
  int checked = 0;
  for (uint32_t p = 0; p < o.spec.params.size(); ++p) {
    if (!is_fp8_param(o.spec.params[p], o.pipeline)) continue;
    const Fp8ParamState* st = nullptr;
    for (const Fp8ParamState& s : last[0].state.fp8)
      if (s.param == p) st = &s;
    REQUIRE(st != nullptr);
    fp8::QuantizeOptions qo;
    if (o.pipeline.fp8.recipe.scaling == fp8::Scaling::delayed) qo.scale = st->scales.scale[0];
    const fp8::QuantizedTensor q = fp8::quantize_tensor(o.pipeline.fp8.recipe, fp8::Input::f32_as_bf16,
                                                        o.spec.params[p].shape, master[p].data(), "", qo);
    std::vector<uint8_t> expect = q.data;
    expect.insert(expect.end(), q.data_col.begin(), q.data_col.end());
    const auto add = [&](const auto& v) {
      const auto* b = reinterpret_cast<const uint8_t*>(v.data());
      expect.insert(expect.end(), b, b + v.size() * sizeof(v[0]));
    };
    add(q.scales.scale);
    add(q.scales.scale_inv);
    add(q.scales.e8m0);
    add(q.scales.e8m0_col);
    const std::vector<uint8_t>& got = last[0].bytes[p];
    INFO("param " << o.spec.params[p].name);
    REQUIRE(got.size() >= expect.size());
    REQUIRE(std::vector<uint8_t>(got.begin(), got.begin() + static_cast<int64_t>(expect.size())) == expect);
    ++checked;
  }
  REQUIRE(checked > 0);
}

void check_coverage(const FullState& f) {
  for (size_t p = 0; p < f.covered.size(); ++p)
    for (int c : f.covered[p]) REQUIRE(c == 1);
}

// Invariant 3: run at dp=N (accumulation 1) and dp=1 (accumulation N) and compare.
void check_invariant3(const Run& a, const app::train::TrainOptions& oa, const Run& b) {
  REQUIRE(a.result.steps.size() == b.result.steps.size());
  bool clipped = false;
  for (size_t t = 0; t < a.result.steps.size(); ++t) {
    INFO("step " << t);
    REQUIRE(a.result.steps[t].loss == b.result.steps[t].loss);
    REQUIRE(a.result.steps[t].grad_norm == b.result.steps[t].grad_norm);
    REQUIRE(a.result.steps[t].clip_coef == b.result.steps[t].clip_coef);
    REQUIRE_FALSE(a.result.steps[t].skipped);
    clipped = clipped || a.result.steps[t].clip_coef < 1.0f;
  }
  REQUIRE(clipped);
  const FullState fa = full_state(a.snaps.back(), oa.spec), fb = full_state(b.snaps.back(), oa.spec);
  check_coverage(fa);
  check_coverage(fb);
  REQUIRE(fa.arrays.size() == fb.arrays.size());
  for (const auto& [name, per] : fa.arrays) {
    REQUIRE(fb.arrays.count(name) == 1);
    for (size_t p = 0; p < per.size(); ++p) {
      INFO(name << " of " << oa.spec.params[p].name);
      REQUIRE(same_floats(per[p], fb.arrays.at(name)[p]));
    }
  }
  for (size_t p = 0; p < oa.spec.params.size(); ++p) {
    INFO("params of " << oa.spec.params[p].name);
    REQUIRE(a.snaps.back()[0].bytes[p] == b.snaps.back()[0].bytes[p]);
  }
}

struct Case {
  DistOpt dist;
  optim::OptimizerKind opt;
};

void run_matrix(const std::vector<Case>& cases, const std::vector<std::string>& recipes,
                const std::vector<uint32_t>& dps, uint64_t steps) {
  for (const Case& c : cases)
    for (const std::string& fp8 : recipes)
      for (uint32_t dp : dps) {
        INFO(dist_opt_name(c.dist) << " " << optim::optimizer_name(c.opt) << " fp8 " << fp8 << " dp " << dp);
        const app::train::TrainOptions oa = base_options(c.dist, c.opt, fp8, dp, 1, steps);
        const app::train::TrainOptions ob = base_options(c.dist, c.opt, fp8, 1, dp, steps);
        const Run a = run_training(oa);
        const Run b = run_training(ob, false);
        check_invariant1(a, dp);
        check_invariant2(a, oa);
        check_invariant3(a, oa, b);
      }
}

const std::vector<std::string> kRecipes = {"none", "tensorwise", "delayed", "blockwise", "mxfp8"};

}  // namespace

TEST_CASE("pipeline invariants 1-3: bucketed, every optimizer and recipe", "[pipeline]") {
  run_matrix({{DistOpt::bucketed, optim::OptimizerKind::adam},
              {DistOpt::bucketed, optim::OptimizerKind::adamw},
              {DistOpt::bucketed, optim::OptimizerKind::lion}},
             kRecipes, {2, 3, 4, 8}, 3);
}

TEST_CASE("pipeline invariants 1-3: layer-wise, every optimizer and recipe", "[pipeline]") {
  run_matrix({{DistOpt::layerwise, optim::OptimizerKind::adam},
              {DistOpt::layerwise, optim::OptimizerKind::adamw},
              {DistOpt::layerwise, optim::OptimizerKind::lion},
              {DistOpt::layerwise, optim::OptimizerKind::muon}},
             kRecipes, {2, 3, 4, 8}, 3);
}

TEST_CASE("pipeline invariants: other recipe variants and layout options", "[pipeline]") {
  // 1x128 blocks, rowwise-only MXFP8 (the compact layer-wise gather path), E5M2, pow2 tensorwise.
  for (const std::string fp8 : {"blockwise-1x128", "mxfp8-row"})
    for (DistOpt d : {DistOpt::bucketed, DistOpt::layerwise}) {
      INFO(fp8 << " " << dist_opt_name(d));
      const app::train::TrainOptions oa = base_options(d, optim::OptimizerKind::adamw, fp8, 3, 1, 2);
      const Run a = run_training(oa);
      check_invariant1(a, 3);
      check_invariant2(a, oa);
      check_invariant3(a, oa, run_training(base_options(d, optim::OptimizerKind::adamw, fp8, 1, 3, 2), false));
    }
  {
    app::train::TrainOptions oa = base_options(DistOpt::bucketed, optim::OptimizerKind::adamw, "tensorwise", 4, 1, 2);
    oa.pipeline.fp8.recipe = fp8::Recipe::tensorwise(fp8::Format::e5m2, true);
    oa.pipeline.bucket_size.reset();  // one bucket per buffer
    oa.pipeline.pad_for_nccl = true;
    app::train::TrainOptions ob = oa;
    ob.dp = 1;
    ob.accumulation = 4;
    const Run a = run_training(oa);
    check_invariant1(a, 4);
    check_invariant2(a, oa);
    check_invariant3(a, oa, run_training(ob, false));
  }
  {
    // The tiny preset (dims not multiples of 32: FP8 blocks cut through rows) with fp32-kept norms.
    app::train::TrainOptions oa = base_options(DistOpt::bucketed, optim::OptimizerKind::adamw, "blockwise", 3, 1, 2);
    oa.spec = model::preset("tiny");
    model::mark_keep_in_fp32(oa.spec, "norm");
    oa.pipeline.bucket_size = 20000;
    app::train::TrainOptions ob = oa;
    ob.dp = 1;
    ob.accumulation = 3;
    const Run a = run_training(oa);
    check_invariant1(a, 3);
    check_invariant2(a, oa);
    check_invariant3(a, oa, run_training(ob, false));
  }
}

TEST_CASE("layer-wise compact FP8 gather is bit-identical to the bf16-staged gather", "[pipeline]") {
  for (const std::string fp8 : {"tensorwise", "delayed", "blockwise", "blockwise-1x128", "mxfp8-row"}) {
    INFO(fp8);
    app::train::TrainOptions o = base_options(DistOpt::layerwise, optim::OptimizerKind::muon, fp8, 3, 1, 3);
    o.pipeline.compact_fp8_gather = true;
    const Run compact = run_training(o);
    o.pipeline.compact_fp8_gather = false;
    const Run staged = run_training(o);
    for (size_t t = 0; t < compact.snaps.size(); ++t)
      for (uint32_t r = 0; r < 3; ++r)
        for (size_t p = 0; p < o.spec.params.size(); ++p) REQUIRE(compact.snaps[t][r].bytes[p] == staged.snaps[t][r].bytes[p]);
  }
}
