// Model-space comparison of fpgather checkpoints through ckpt::ParamSource: the same state in two DP
// sizes and state layouts compares equal, a perturbed state does not.
#include <cstring>
#include <string>
#include <vector>

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

TEST_CASE("a plan of reads changes no value read: in the plan, out of it, and replanned", "[ckpt][param_source]") {
  fpckpt::CheckpointReader r(valid("dp2-bucket"));
  fpckpt::CheckpointParams src(r);
  const auto& ts = src.tensors();
  auto bytes_of = [&](size_t t) { return ts[t].numel() * (dtype_bits(ts[t].dtype) / 8); };
  std::vector<std::vector<uint8_t>> whole(ts.size());
  for (size_t t = 0; t < ts.size(); ++t) {
    whole[t].resize(bytes_of(t));
    src.read(t, 0, ts[t].numel(), whole[t].data());
  }
  // Each tensor in two halves, in order.
  std::vector<ckpt::ParamRange> plan;
  for (size_t t = 0; t < ts.size(); ++t) {
    const uint64_t n = ts[t].numel(), mid = n / 2;
    if (mid > 0) plan.push_back({t, 0, mid});
    plan.push_back({t, mid, n});
  }
  auto read_and_check = [&](const ckpt::ParamRange& p) {
    const size_t elem = dtype_bits(ts[p.tensor].dtype) / 8;
    std::vector<uint8_t> got((p.hi - p.lo) * elem);
    src.read(p.tensor, p.lo, p.hi, got.data());
    INFO(ts[p.tensor].name << " [" << p.lo << ", " << p.hi << ")");
    CHECK(std::memcmp(got.data(), whole[p.tensor].data() + p.lo * elem, got.size()) == 0);
  };
  src.plan_reads(plan, 1 << 16);
  for (const auto& p : plan) read_and_check(p);
  // Replanned, with reads outside the plan between planned ones, and entries no read can match.
  auto odd = plan;
  odd.push_back({ts.size() + 5, 0, 1});
  odd.insert(odd.begin() + 1, {0, 1, 0});
  src.plan_reads(odd, 1 << 20);
  for (size_t i = 0; i < plan.size(); ++i) {
    read_and_check(plan[i]);
    read_and_check({i % ts.size(), 0, 1});  // not the next planned read
  }
  src.plan_reads({}, 0);
  read_and_check(plan.back());
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
  for (auto weights : {app::convert::ExportWeights::bf16, app::convert::ExportWeights::fp32}) {
    app::convert::ExportOptions o;
    o.weights = weights;
    o.states = true;
    o.force = true;  // the second pass replaces the first pass's files
    const std::string a = tmp.path + "/a.safetensors", b = tmp.path + "/b.safetensors";
    app::convert::export_checkpoint(valid("dp2-bucket"), a, o);
    fpckpt::CheckpointReader r(valid("dp2-bucket"));
    fpckpt::CheckpointParams src(r);
    const auto sum = app::convert::export_params(src, b, o);
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
