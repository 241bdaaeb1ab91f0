// Model-space comparison of fpgather checkpoints through ckpt::ParamSource: the same state in two DP
// sizes and state layouts compares equal, a perturbed state does not.
#include <string>

#include "catch.h"
#include "ckpt/param_diff.h"
#include "formats/fpckpt/param_source.h"

using namespace fpg;

namespace {
std::string valid(const std::string& name) { return std::string(FPG_TESTDATA_DIR) + "/ckpt/valid/" + name; }
}  // namespace

TEST_CASE("an fpgather checkpoint seen per parameter", "[ckpt][param_source]") {
  fpckpt::CheckpointReader r(valid("dp2-bucket"));
  fpckpt::CheckpointParams src(r);
  REQUIRE_FALSE(src.tensors().empty());
  bool master = false, weight = false;
  for (const auto& t : src.tensors()) {
    master = master || t.role == "master";
    weight = weight || t.role == "weight";
    CHECK(t.name.rfind(t.param, 0) == 0);
  }
  CHECK(master);
  CHECK(weight);
}

TEST_CASE("diff_params: bucket and model layouts of one state are equal", "[ckpt][param_diff]") {
  fpckpt::CheckpointReader a(valid("dp2-bucket")), b(valid("dp4-model"));
  fpckpt::CheckpointParams pa(a), pb(b);
  const ckpt::DiffReport rep = ckpt::diff_params(pa, pb, {});
  INFO((rep.diffs.empty() ? std::string() : rep.diffs[0].key + ": " + rep.diffs[0].what + " " + rep.diffs[0].detail));
  CHECK(rep.equal());
  CHECK(rep.keys_compared == pa.tensors().size());
  CHECK(rep.elements_compared > 0);
}

TEST_CASE("diff_params: a perturbed state differs, within tolerance it does not", "[ckpt][param_diff]") {
  fpckpt::CheckpointReader a(valid("dp2-model")), b(valid("dp4-model-perturbed"));
  fpckpt::CheckpointParams pa(a), pb(b);
  const ckpt::DiffReport rep = ckpt::diff_params(pa, pb, {});
  REQUIRE_FALSE(rep.equal());
  CHECK(rep.diffs[0].what == "values");
  CHECK(rep.diffs[0].differing > 0);
  CHECK_FALSE(rep.diffs[0].first.empty());
  ckpt::DiffOptions loose;
  loose.atol = 1;
  CHECK(ckpt::diff_params(pa, pb, loose).equal());
}
