#include "cmd/bench/step_bench.h"

#include <algorithm>
#include <random>

#include "cmd/bench/memcpy_baseline.h"
#include "cmd/bench/timing.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "layout/bucketed_layout.h"
#include "pipeline/optimizer_step.h"
#include "pipeline/pipeline_layout.h"
#include "pipeline/rank_state.h"
#include "app/train/trainer.h"

namespace fpg::bench {
namespace {

// Rank 0's optimizer state at dp, as the bucketed pipeline lays it out (fragments, zero moments).
pipeline::OptimizerState owned_fragments(const model::ModelSpec& spec, uint32_t dp, optim::OptimizerKind kind) {
  pipeline::PipelineConfig cfg;
  const layout::BucketedLayout l = layout::build_bucketed_layout(spec, pipeline::bucketed_options(spec, cfg, dp));
  pipeline::OptimizerState st;
  st.kind = kind;
  for (const layout::RankFragment& rf : layout::rank_fragments(l, 0))
    st.add(rf.fragment.param, rf.fragment.param_range, spec.params[rf.fragment.param].numel());
  return st;
}

uint64_t fragment_numel(const pipeline::OptimizerState& st) {
  uint64_t n = 0;
  for (const pipeline::StateFragment& f : st.fragments) n += f.param_range.size();
  return n;
}

}  // namespace

StepBenchResult run_step_bench(const StepBenchOptions& o) {
  if (o.dp.empty()) throw UsageError("bench step: no DP sizes");
  if (o.steps < 1) throw UsageError("bench step: --steps must be at least 1");
  StepBenchResult res;
  for (uint32_t dp : o.dp) {
    app::train::TrainOptions t;
    t.spec = o.spec;
    t.dp = dp;
    t.steps = o.steps;
    t.micro_batch = o.micro_batch;
    t.pipeline.lr = 1e-3;
    const app::train::TrainResult r = app::train::train(t);
    res.phases.push_back({dp, r.summary.step_time_ms, r.summary.median_times, r.summary.initial_loss,
                          r.summary.final_loss});
  }

  // The largest shard (smallest DP): the working set should not fit in the caches.
  const uint32_t dp = *std::min_element(o.dp.begin(), o.dp.end());
  ThreadPool one(1);
  const pipeline::Hypers adamw = pipeline::make_hypers(pipeline::PipelineConfig{}, optim::OptimizerKind::adamw);
  const pipeline::Hypers lion = pipeline::make_hypers(pipeline::PipelineConfig{}, optim::OptimizerKind::lion);
  struct Case {
    optim::OptimizerKind kind;
    const char* name;
    uint64_t bytes_per_element;
    const pipeline::Hypers* h;
  };
  for (const Case& c : {Case{optim::OptimizerKind::adamw, "adamw", 28, &adamw},
                        Case{optim::OptimizerKind::lion, "lion", 20, &lion}}) {
    pipeline::OptimizerState st = owned_fragments(o.spec, dp, c.kind);
    const uint64_t numel = fragment_numel(st);
    const uint64_t bytes = numel * c.bytes_per_element;
    double memcpy_gbps = 0;
    {  // the baseline first, freed before the optimizer's arenas exist (peak memory)
      std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
      const Timing base = time_it([&] { parallel_memcpy(one, dst.data(), src.data(), bytes); }, 3, o.min_seconds);
      memcpy_gbps = gbps(bytes, base.best);
      res.optimizer.push_back({"memcpy", dp, numel, bytes, base.best, base.median, memcpy_gbps, 1.0});
    }
    st.allocate();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& x : st.master) x = normal(rng);
    std::vector<float> grad_arena(st.numel());
    for (float& x : grad_arena) x = normal(rng) * 1e-3f;
    std::vector<const float*> grads(st.fragments.size());
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = grad_arena.data() + st.fragments[i].offset;
    const Timing t = time_it([&] { pipeline::optimizer_step(st, grads, *c.h); }, 3, o.min_seconds);
    const double g = gbps(bytes, t.best);
    res.optimizer.push_back({c.name, dp, numel, bytes, t.best, t.median, g, memcpy_gbps > 0 ? g / memcpy_gbps : 0});
  }
  return res;
}

}  // namespace fpg::bench
