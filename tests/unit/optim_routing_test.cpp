// Which parameters Muon takes and which go to the scalar optimizer (Megatron-Core's _is_muon_excluded).
#include "catch.h"
#include "optim/routing.h"

using namespace fpg::optim;

TEST_CASE("Muon takes 2-D hidden matrices; the rest goes to the scalar optimizer", "[optim][routing]") {
  const ParamRouting hidden{{1024, 4096}, false, true};
  const ParamRouting embedding{{32000, 1024}, true, true};
  const ParamRouting bias{{4096}, false, true};
  const ParamRouting conv{{64, 3, 3, 3}, false, true};
  const ParamRouting scalar{{}, false, true};
  const ParamRouting opted_out{{256, 256}, false, false};
  CHECK(muon_takes(hidden));
  CHECK_FALSE(muon_takes(embedding));
  CHECK_FALSE(muon_takes(bias));
  CHECK_FALSE(muon_takes(conv));
  CHECK_FALSE(muon_takes(scalar));
  CHECK_FALSE(muon_takes(opted_out));

  CHECK(optimizer_for(hidden, OptimizerKind::muon, ScalarOptimizer::adamw) == OptimizerKind::muon);
  CHECK(optimizer_for(embedding, OptimizerKind::muon, ScalarOptimizer::adamw) == OptimizerKind::adamw);
  CHECK(optimizer_for(bias, OptimizerKind::muon, ScalarOptimizer::lion) == OptimizerKind::lion);
  // Without Muon every parameter takes the configured optimizer.
  CHECK(optimizer_for(embedding, OptimizerKind::lion, ScalarOptimizer::adamw) == OptimizerKind::lion);
  CHECK(optimizer_for(hidden, OptimizerKind::adam, ScalarOptimizer::lion) == OptimizerKind::adam);
}

TEST_CASE("Optimizer names round-trip", "[optim][routing]") {
  for (OptimizerKind k : {OptimizerKind::adam, OptimizerKind::adamw, OptimizerKind::lion, OptimizerKind::muon})
    CHECK(parse_optimizer(optimizer_name(k)) == k);
  CHECK(parse_scalar_optimizer("lion") == ScalarOptimizer::lion);
  CHECK(parse_scalar_optimizer(scalar_optimizer_name(ScalarOptimizer::adamw)) == ScalarOptimizer::adamw);
  CHECK_FALSE(parse_optimizer("sgd"));
  CHECK_FALSE(parse_scalar_optimizer("muon"));
}
