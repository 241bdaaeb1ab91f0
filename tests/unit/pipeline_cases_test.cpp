// The seed's bug classes and the pipeline's edge cases:
//   - a rank owning nothing in a bucket (its state and the collectives still line up);
//   - rank 0 owning no fp32-kept param (layer-wise fp32 matrices: an empty F32 gather slot on rank 0);
//   - Lion keeps no exp_avg_sq;
//   - optimizer state attached to the right param when fp32 and bf16 params mix in one group;
//   - muon with the bucketed optimizer is refused with the reason;
//   - non-finite gradients skip the step on every rank;
//   - the exact grad norm does not depend on the partition.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "catch.h"
#include "comm/group.h"
#include "core/error.h"
#include "optim/adam.h"
#include "pipeline/grad_norm.h"
#include "pipeline/optimizer_step.h"
#include "pipeline_test_util.h"

using namespace fpg;
using namespace fpg::pipeline;
using namespace fpg::pipeline::test;

namespace {

app::train::TrainOptions options(DistOpt d, optim::OptimizerKind opt, uint32_t dp, uint64_t accumulation) {
  app::train::TrainOptions o;
  o.spec = spec32();
  o.dp = dp;
  o.accumulation = accumulation;
  o.steps = 2;
  o.micro_batch = 8;
  o.seed = 11;
  o.pipeline.dist_opt = d;
  o.pipeline.optimizer = opt;
  o.pipeline.clip_grad = 0.05;
  o.pipeline.bucket_size = 3000;
  return o;
}

void check_same(const Run& a, const Run& b, const model::ModelSpec& spec) {
  const FullState fa = full_state(a.snaps.back(), spec), fb = full_state(b.snaps.back(), spec);
  for (const auto& [name, per] : fa.arrays)
    for (size_t p = 0; p < per.size(); ++p) REQUIRE(same_floats(per[p], fb.arrays.at(name)[p]));
  for (size_t p = 0; p < spec.params.size(); ++p) REQUIRE(a.snaps.back()[0].bytes[p] == b.snaps.back()[0].bytes[p]);
  for (size_t t = 0; t < a.snaps.size(); ++t)
    for (size_t r = 1; r < a.snaps[t].size(); ++r)
      for (size_t p = 0; p < spec.params.size(); ++p) REQUIRE(a.snaps[t][r].bytes[p] == a.snaps[t][0].bytes[p]);
}

}  // namespace

TEST_CASE("a rank owning nothing in a bucket still takes part and keeps a consistent state", "[pipeline]") {
  app::train::TrainOptions o = options(DistOpt::bucketed, optim::OptimizerKind::lion, 8, 1);
  o.pipeline.bucket_size = 1;  // a bucket per param: a 64-element norm pads to 128, 8 shards of 16
  o.pipeline.lr = 1e-4;
  const layout::BucketedLayout l = layout::build_bucketed_layout(o.spec, {8, o.pipeline.bucket_size});
  bool found = false;
  for (const auto& buf : l.buffers)
    for (const auto& b : buf.buckets)
      for (const auto& s : b.shards) found = found || s.fragments.empty();
  REQUIRE(found);
  const Run a = run_training(o);
  app::train::TrainOptions ob = o;
  ob.dp = 1;
  ob.accumulation = 8;
  check_same(a, run_training(ob), o.spec);
  for (const RankSnap& r : a.snaps.back()) {
    REQUIRE(r.state.bucketed.exp_avg.size() == r.state.bucketed.master.size());
    REQUIRE(r.state.bucketed.exp_avg_sq.empty());
  }
}

TEST_CASE("rank 0 owning no fp32-kept param: layer-wise fp32 matrices", "[pipeline]") {
  for (uint32_t dp : {2u, 4u}) {
    INFO("dp " << dp);
    app::train::TrainOptions o = options(DistOpt::layerwise, optim::OptimizerKind::muon, dp, 1);
    REQUIRE(model::mark_keep_in_fp32(o.spec, "blocks\\.1\\.fc2") == 1);
    o.pipeline.fp32_matrices = true;
    o.pipeline.fp8.enabled = true;
    o.pipeline.fp8.recipe = fp8::Recipe::blockwise_128x128();
    layout::BucketedOptions bo;
    bo.dp = dp;
    const layout::LayerWiseLayout l = layout::build_layer_wise_layout(o.spec, bo, {true});
    const auto g = l.group(DType::F32);
    REQUIRE(g.has_value());
    REQUIRE(l.groups[*g].sizes[0] == 0);  // rank 0 owns no fp32 matrix
    REQUIRE(l.groups[*g].total > 0);
    const Run a = run_training(o);
    app::train::TrainOptions ob = o;
    ob.dp = 1;
    ob.accumulation = dp;
    check_same(a, run_training(ob), o.spec);
    // The fp32 matrix stays fp32 bytes (4 per element) on every rank.
    const int64_t p = o.spec.find("blocks.1.fc2.weight");
    REQUIRE(a.snaps.back()[0].bytes[static_cast<size_t>(p)].size() == o.spec.params[static_cast<size_t>(p)].numel() * 4);
  }
}

TEST_CASE("Lion keeps no exp_avg_sq; muon's scalar optimizer keeps its own keys", "[pipeline]") {
  REQUIRE(state_keys(optim::OptimizerKind::lion) == std::vector<const char*>{"exp_avg"});
  app::train::TrainOptions o = options(DistOpt::layerwise, optim::OptimizerKind::muon, 3, 1);
  o.pipeline.scalar_optimizer = optim::ScalarOptimizer::lion;
  o.pipeline.lr = 1e-4;
  const Run a = run_training(o);
  for (const RankSnap& r : a.snaps.back()) {
    REQUIRE(r.state.bucketed.kind == optim::OptimizerKind::lion);
    REQUIRE(r.state.bucketed.exp_avg_sq.empty());
    REQUIRE(r.state.bucketed.exp_avg.size() == r.state.bucketed.master.size());
    REQUIRE(r.state.layer_wise.kind == optim::OptimizerKind::muon);
    REQUIRE(r.state.layer_wise.exp_avg.empty());
    REQUIRE(r.state.layer_wise.momentum.size() == r.state.layer_wise.master.size());
  }
  app::train::TrainOptions ob = o;
  ob.dp = 1;
  ob.accumulation = 3;
  check_same(a, run_training(ob), o.spec);
}

TEST_CASE("optimizer state is attached to the right param when fp32 and bf16 params mix", "[pipeline]") {
  // A free-form spec: fp32-kept and bf16 params interleaved in registration order, odd sizes, so
  // the fp32 buffer and the bf16 buffer cut fragments differently. Each param gets its own constant
  // gradient and its own initial value: any state landing on another param shows.
  model::ModelSpec spec;
  spec.name = "mixed";
  const uint64_t sizes[] = {300, 77, 1000, 10, 129, 515};
  for (int i = 0; i < 6; ++i) {
    model::Param p;
    p.name = "p" + std::to_string(i);
    p.shape = {sizes[i]};
    p.role = model::Role::vector;
    p.dtype = i % 2 ? DType::F32 : DType::BF16;
    p.keep_in_fp32 = i % 2 == 1;
    spec.params.push_back(p);
  }
  PipelineConfig cfg;
  cfg.optimizer = optim::OptimizerKind::adam;
  cfg.weight_decay = 0.1;
  cfg.clip_grad = 0;
  cfg.bucket_size = 200;
  const auto init_value = [](uint32_t p, uint64_t k) { return 0.25f * float(p + 1) + 1e-3f * float(k % 7); };
  const auto grad_value = [](uint32_t p, uint64_t k) { return float(p + 1) * (k % 2 ? 0.5f : -0.75f); };
  for (uint32_t dp : {1u, 3u, 4u}) {
    INFO("dp " << dp);
    comm::run_ranks(static_cast<int>(dp), [&](comm::Communicator& c) {
      RankPipeline pipe(spec, cfg, c, [&](uint32_t p, float* out) {
        for (uint64_t k = 0; k < spec.params[p].numel(); ++k) out[k] = init_value(p, k);
      });
      for (int step = 0; step < 2; ++step)
        pipe.step([&](const std::vector<const float*>&, const std::vector<float*>& grads) {
          for (uint32_t p = 0; p < spec.params.size(); ++p)
            for (uint64_t k = 0; k < spec.params[p].numel(); ++k) grads[p][k] = grad_value(p, k);
        }, dp);
      // Reference: whole-param Adam on each param alone, two steps with the same (scaled) grads.
      const OptimizerState& st = pipe.state().bucketed;
      REQUIRE(st.exp_avg_sq.size() == st.master.size());
      for (const auto& [param, ids] : st.by_param) {
        const uint64_t n = spec.params[param].numel();
        std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
        for (uint64_t k = 0; k < n; ++k) {
          p[k] = init_value(param, k);
          g[k] = grad_value(param, k);  // dp equal copies summed, then / dp: exact here
        }
        optim::AdamHyper h = make_hypers(cfg, cfg.optimizer).adam;
        for (int64_t t = 1; t <= 2; ++t) optim::adam_step(h, t, p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(n));
        for (uint32_t id : ids) {
          const StateFragment& f = st.fragments[id];
          REQUIRE(f.param == param);
          for (uint64_t k = 0; k < f.param_range.size(); ++k) {
            const uint64_t e = f.param_range.begin + k;
            REQUIRE(st.master[f.offset + k] == p[e]);
            REQUIRE(st.exp_avg[f.offset + k] == m[e]);
            REQUIRE(st.exp_avg_sq[f.offset + k] == v[e]);
          }
          REQUIRE(st.find(param, f.param_range.begin) == &f);
        }
      }
    });
  }
}

TEST_CASE("muon with the bucketed optimizer is refused with the reason", "[pipeline]") {
  PipelineConfig c;
  c.optimizer = optim::OptimizerKind::muon;
  c.dist_opt = DistOpt::bucketed;
  REQUIRE_THROWS_AS(validate_config(c), UsageError);
  try {
    validate_config(c);
  } catch (const UsageError& e) {
    REQUIRE(std::string(e.what()).find("layerwise") != std::string::npos);
  }
}

TEST_CASE("non-finite gradients skip the step on every rank", "[pipeline]") {
  const model::ModelSpec spec = spec32();
  PipelineConfig cfg;
  cfg.bucket_size = 3000;
  for (DistOpt d : {DistOpt::bucketed, DistOpt::layerwise}) {
    cfg.dist_opt = d;
    comm::run_ranks(3, [&](comm::Communicator& c) {
      RankPipeline pipe(spec, cfg, c, [&](uint32_t p, float* out) {
        for (uint64_t k = 0; k < spec.params[p].numel(); ++k) out[k] = 0.01f * float(k % 13);
      });
      const RankState before = pipe.state();
      const StepReport rep = pipe.step([&](const std::vector<const float*>&, const std::vector<float*>& grads) {
        for (uint32_t p = 0; p < spec.params.size(); ++p)
          for (uint64_t k = 0; k < spec.params[p].numel(); ++k) grads[p][k] = 1e-3f;
        if (c.rank() == 2) grads[1][5] = std::nanf("");
      }, 3);
      REQUIRE(rep.skipped);
      REQUIRE(std::isnan(rep.grad_norm));
      REQUIRE(pipe.state().bucketed.step == 0);
      REQUIRE(same_floats(pipe.state().bucketed.master, before.bucketed.master));
      REQUIRE(same_floats(pipe.state().layer_wise.master, before.layer_wise.master));
      const StepReport ok = pipe.step([&](const std::vector<const float*>&, const std::vector<float*>& grads) {
        for (uint32_t p = 0; p < spec.params.size(); ++p)
          for (uint64_t k = 0; k < spec.params[p].numel(); ++k) grads[p][k] = 1e-3f;
      }, 3);
      REQUIRE_FALSE(ok.skipped);
      REQUIRE(pipe.state().bucketed.step == 1);
    });
  }
}

TEST_CASE("exact grad norm: partition-independent and accurate", "[pipeline]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> g(10007);
  for (size_t i = 0; i < g.size(); ++i) g[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 40) - 30);
  g[17] = -0.0f;
  g[99] = std::ldexp(1.0f, -140);  // fp32 subnormal
  const float m = max_abs(g.data(), g.size(), 0.0f);
  const int e = norm_exponent(m);
  uint128 whole = 0;
  add_scaled_squares(g.data(), g.size(), e, whole);
  for (size_t cut : {1ul, 8ul, 333ul, 5000ul, 10006ul}) {
    uint128 a = 0, b = 0;
    add_scaled_squares(g.data(), cut, e, a);
    add_scaled_squares(g.data() + cut, g.size() - cut, e, b);
    uint128 c = 0;  // reversed order of the halves
    add_scaled_squares(g.data() + cut, g.size() - cut, e, c);
    add_scaled_squares(g.data(), cut, e, c);
    REQUIRE(a + b == whole);
    REQUIRE(c == whole);
  }
  long double ref = 0;
  for (float x : g) ref += static_cast<long double>(x) * x;
  REQUIRE(norm_from_sum(whole, e) == Approx(static_cast<double>(std::sqrt(ref))).epsilon(1e-12));
  // NaN sticks in the max, inf too.
  std::vector<float> bad = {1.0f, std::nanf(""), 2.0f};
  REQUIRE(std::isnan(max_abs(bad.data(), bad.size(), 0.0f)));
  REQUIRE(clip_coefficient(2.0, 1.0) == static_cast<float>(1.0 / (2.0 + 1e-6)));
  REQUIRE(clip_coefficient(0.5, 1.0) == 1.0f);
}

TEST_CASE("layer-wise transports: compact FP8 where smaller, bf16 staging otherwise, empty ranks", "[pipeline]") {
  const model::ModelSpec spec = spec32();
  for (const std::string fp8 : {"tensorwise", "mxfp8", "mxfp8-row"}) {
    PipelineConfig cfg;
    cfg.dist_opt = DistOpt::layerwise;
    cfg.optimizer = optim::OptimizerKind::muon;
    set_fp8(cfg, fp8);
    comm::run_ranks(8, [&](comm::Communicator& c) {
      RankPipeline pipe(spec, cfg, c, [&](uint32_t p, float* out) {
        for (uint64_t k = 0; k < spec.params[p].numel(); ++k) out[k] = 0.01f * float(int(k % 13) - 6);
      });
      const auto* l = pipe.layer_wise_layout();
      REQUIRE(l != nullptr);
      int empty = 0;
      for (const auto& r : l->ranks) empty += r.owned.empty() ? 1 : 0;
      REQUIRE(empty == 4);  // 4 matrices on 8 ranks
      REQUIRE(pipe.state().layer_wise.fragments.size() == l->ranks[static_cast<size_t>(c.rank())].owned.size());
      for (const auto& m : l->matrices) {
        const Transport want = fp8 == "mxfp8" ? Transport::bf16 : Transport::fp8_compact;
        REQUIRE(pipe.transport(m.param) == want);
      }
      REQUIRE_FALSE(pipe.transport(0).has_value());  // input.weight: bucketed
    });
  }
}

TEST_CASE("trainer options: muon defaults to layerwise, refuses bucketed, keep-fp32 regex", "[pipeline]") {
  REQUIRE(resolve_dist_opt(std::nullopt, optim::OptimizerKind::muon) == DistOpt::layerwise);
  REQUIRE(resolve_dist_opt(std::nullopt, optim::OptimizerKind::adamw) == DistOpt::bucketed);
  REQUIRE(resolve_dist_opt(DistOpt::bucketed, optim::OptimizerKind::muon) == DistOpt::bucketed);
  app::train::TrainOptions o = options(DistOpt::bucketed, optim::OptimizerKind::muon, 2, 1);
  REQUIRE_THROWS_AS(app::train::train(o), UsageError);
  o.pipeline.dist_opt = DistOpt::layerwise;
  o.keep_fp32 = "norm";
  o.steps = 1;
  bool seen = false;
  app::train::train(o, [&](uint64_t, const RankPipeline& p) {
    const int64_t n = p.spec().find("final_norm.weight");
    REQUIRE(p.spec().params[static_cast<size_t>(n)].keep_in_fp32);
    REQUIRE(p.stored_bytes(static_cast<uint32_t>(n)).size() == 4 * p.spec().params[static_cast<size_t>(n)].numel());
    seen = true;
  });
  REQUIRE(seen);
}

TEST_CASE("accumulation on several ranks keeps ranks identical; pool size does not change bits", "[pipeline]") {
  for (DistOpt d : {DistOpt::bucketed, DistOpt::layerwise}) {
    app::train::TrainOptions o = options(d, optim::OptimizerKind::adamw, 3, 2);
    o.pipeline.fp8.enabled = true;
    o.pipeline.fp8.recipe = fp8::Recipe::mxfp8(fp8::Format::e4m3, fp8::MxRule::rceil, true, true);
    const Run a = run_training(o);
    for (size_t t = 0; t < a.snaps.size(); ++t)
      for (size_t r = 1; r < 3; ++r)
        for (size_t p = 0; p < o.spec.params.size(); ++p) REQUIRE(a.snaps[t][r].bytes[p] == a.snaps[t][0].bytes[p]);
    o.threads_per_rank = 3;
    const Run b = run_training(o);
    check_same(a, b, o.spec);
    REQUIRE(a.result.steps.back().loss == b.result.steps.back().loss);
  }
}
