// Training through the pipelines learns: the built-in tiny network, 200 steps of AdamW at DP 2
// ends below a third of its initial loss; Lion, Muon (layer-wise) and an FP8 recipe are spot-checked
// with fewer steps. The hidden "[.pipeline-curves]" case prints loss curves and phase times.
#include <cstdio>
#include <string>

#include "catch.h"
#include "model/presets.h"
#include "pipeline_test_util.h"
#include "app/train/trainer.h"

using namespace fpg;
using namespace fpg::pipeline;

namespace {

app::train::TrainOptions tiny(optim::OptimizerKind opt, uint64_t steps) {
  app::train::TrainOptions o;
  o.spec = model::preset("tiny");
  o.dp = 2;
  o.steps = steps;
  o.micro_batch = 32;
  o.seed = 1234;
  o.pipeline.optimizer = opt;
  o.pipeline.clip_grad = 1.0;
  switch (opt) {
    case optim::OptimizerKind::lion:
      o.pipeline.lr = 1e-3;
      o.pipeline.beta1 = 0.9;
      o.pipeline.beta2 = 0.99;
      o.pipeline.weight_decay = 0.1;
      break;
    case optim::OptimizerKind::muon:
      o.pipeline.dist_opt = DistOpt::layerwise;
      o.pipeline.lr = 3e-3;
      break;
    default: o.pipeline.lr = 3e-3; break;
  }
  return o;
}

}  // namespace

TEST_CASE("tiny AdamW, 200 steps at DP 2: the loss falls below a third", "[pipeline]") {
  const app::train::TrainResult r = app::train::train(tiny(optim::OptimizerKind::adamw, 200));
  INFO("initial " << r.summary.initial_loss << " final " << r.summary.final_loss);
  REQUIRE(r.summary.final_loss < r.summary.initial_loss / 3);
  REQUIRE(r.summary.skipped == 0);
}

TEST_CASE("Lion, Muon (layer-wise) and FP8 tensorwise learn", "[pipeline]") {
  {
    const app::train::TrainResult r = app::train::train(tiny(optim::OptimizerKind::lion, 80));
    INFO("lion " << r.summary.initial_loss << " -> " << r.summary.final_loss);
    REQUIRE(r.summary.final_loss < r.summary.initial_loss / 2);
  }
  {
    const app::train::TrainResult r = app::train::train(tiny(optim::OptimizerKind::muon, 80));
    INFO("muon " << r.summary.initial_loss << " -> " << r.summary.final_loss);
    REQUIRE(r.summary.final_loss < r.summary.initial_loss / 2);
  }
  {
    app::train::TrainOptions o = tiny(optim::OptimizerKind::adamw, 80);
    o.pipeline.fp8.enabled = true;
    o.pipeline.fp8.recipe = fp8::Recipe::tensorwise();
    const app::train::TrainResult r = app::train::train(o);
    INFO("fp8 " << r.summary.initial_loss << " -> " << r.summary.final_loss);
    REQUIRE(r.summary.final_loss < r.summary.initial_loss / 2);
  }
}

TEST_CASE("print loss curves", "[.pipeline-curves]") {
  struct C {
    const char* name;
    optim::OptimizerKind opt;
    const char* fp8;
    const char* model;
  };
  const C cases[] = {{"adamw", optim::OptimizerKind::adamw, "none", "tiny"},
                     {"adam", optim::OptimizerKind::adam, "none", "tiny"},
                     {"lion", optim::OptimizerKind::lion, "none", "tiny"},
                     {"muon", optim::OptimizerKind::muon, "none", "tiny"},
                     {"adamw+tensorwise", optim::OptimizerKind::adamw, "tensorwise", "tiny"},
                     {"adamw+delayed", optim::OptimizerKind::adamw, "delayed", "tiny"},
                     {"adamw+blockwise", optim::OptimizerKind::adamw, "blockwise", "tiny"},
                     {"muon+blockwise", optim::OptimizerKind::muon, "blockwise", "tiny"},
                     {"adamw+mxfp8 (t32)", optim::OptimizerKind::adamw, "mxfp8", "t32"}};
  for (const C& c : cases) {
    app::train::TrainOptions o = tiny(c.opt, 200);
    if (std::string(c.model) == "t32") o.spec = pipeline::test::spec32();
    pipeline::test::set_fp8(o.pipeline, c.fp8);
    const app::train::TrainResult r = app::train::train(o);
    std::printf("%-20s", c.name);
    for (uint64_t t : {0, 25, 50, 100, 150, 199}) std::printf(" %3llu:%.4f", (unsigned long long)t, r.steps[t].loss);
    std::printf("  step %.2f ms (fb %.2f rs %.2f opt %.2f cb %.2f ga %.2f)\n", r.summary.step_time_ms,
                r.summary.median_times.forward_backward * 1e3, r.summary.median_times.reduce_scatter * 1e3,
                r.summary.median_times.optimizer * 1e3, r.summary.median_times.copy_back * 1e3,
                r.summary.median_times.gather * 1e3);
  }
}

TEST_CASE("print phase times of the small preset", "[.pipeline-bench]") {
  for (const char* fp8 : {"none", "blockwise", "mxfp8"})
    for (optim::OptimizerKind opt : {optim::OptimizerKind::adamw, optim::OptimizerKind::muon}) {
      app::train::TrainOptions o = tiny(opt, 6);
      o.spec = model::preset("small");
      pipeline::test::set_fp8(o.pipeline, fp8);
      const app::train::TrainResult r = app::train::train(o);
      const auto& t = r.summary.median_times;
      std::printf("small dp2 %-6s %-10s loss %.4f->%.4f step %.1f ms (fb %.1f rs %.1f opt %.1f cb %.1f ga %.1f)\n",
                  optim::optimizer_name(opt), fp8, r.summary.initial_loss, r.summary.final_loss,
                  r.summary.step_time_ms, t.forward_backward * 1e3, t.reduce_scatter * 1e3, t.optimizer * 1e3,
                  t.copy_back * 1e3, t.gather * 1e3);
    }
}
