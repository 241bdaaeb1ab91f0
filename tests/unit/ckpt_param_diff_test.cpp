// Model-space comparison of fpgather checkpoints through ckpt::ParamSource: the same state in two DP
// sizes and state layouts compares equal, a perturbed state does not.
#include <cstring>
#include <string>

#include "catch.h"
#include "ckpt/param_diff.h"
#include "app/convert/checkpoint_export.h"
#include "app/convert/param_export.h"
#include "ckpt_test_util.h"
#include "formats/fpckpt/param_source.h"
#include "formats/safetensors/reader.h"

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

TEST_CASE("export_params writes what the checkpoint export writes", "[ckpt][param_export]") {
  test::CkptTempDir tmp("param-export");
  for (auto weights : {convert::ExportWeights::bf16, convert::ExportWeights::fp32}) {
    convert::ExportOptions o;
    o.weights = weights;
    o.states = true;
    o.force = true;  // the second pass replaces the first pass's files
    const std::string a = tmp.path + "/a.safetensors", b = tmp.path + "/b.safetensors";
    convert::export_checkpoint(valid("dp2-bucket"), a, o);
    fpckpt::CheckpointReader r(valid("dp2-bucket"));
    fpckpt::CheckpointParams src(r);
    const auto sum = convert::export_params(src, b, o);
    CHECK(sum.tensors > 0);
    safetensors::Reader ra(a), rb(b);
    REQUIRE(ra.size() == rb.size());
    for (const auto& t : ra.tensors()) {
      INFO(t.name);
      const auto* u = rb.find(t.name);
      REQUIRE(u);
      CHECK(u->dtype == t.dtype);
      CHECK(u->shape == t.shape);
      const auto x = ra.bytes(t), y = rb.bytes(*u);
      REQUIRE(x.size == y.size);
      CHECK(std::memcmp(x.data, y.data, x.size) == 0);
    }
  }
}
