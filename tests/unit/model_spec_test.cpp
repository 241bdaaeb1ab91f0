// Model specs: presets, the built-in network's params, validation and --keep-fp32.
#include <string>

#include "catch.h"
#include "core/error.h"
#include "model/presets.h"

using namespace fpg;
using namespace fpg::model;

TEST_CASE("presets land near their target sizes", "[model]") {
  // tiny is ~115k: the smallest 4-block network whose matrices MXFP8 takes (multiples of 32) and
  // whose norms still leave 64-alignment gaps.
  const std::pair<const char*, double> targets[] = {{"tiny", 1.15e5}, {"small", 1e7}, {"base", 1.25e8}, {"1b", 1e9}};
  for (const auto& [name, target] : targets) {
    CAPTURE(name);
    const ModelSpec spec = preset(name);
    CHECK(spec.name == name);
    REQUIRE(spec.network);
    CHECK(spec.numel() == network_numel(*spec.network));
    CHECK(double(spec.numel()) > 0.9 * target);
    CHECK(double(spec.numel()) < 1.1 * target);
    CHECK(!check_spec(spec));
  }
  CHECK(preset("tiny").numel() == 114912);
  CHECK(preset_names() == std::vector<std::string>{"tiny", "small", "base", "1b"});
  CHECK_THROWS_AS(preset("huge"), UsageError);
}

TEST_CASE("the built-in network registers its params in forward order", "[model]") {
  const ModelSpec spec = preset("tiny");
  const NetworkDims d = *spec.network;
  REQUIRE(spec.params.size() == 3 + 3 * d.layers);
  const Param& in = spec.params.front();
  CHECK(in.name == "input.weight");
  CHECK(in.shape == std::vector<uint64_t>{d.hidden, d.input});
  CHECK(in.role == Role::embedding);
  CHECK(!in.muon_eligible());
  const Param& fc1 = spec.params[2];
  CHECK(fc1.name == "blocks.0.fc1.weight");
  CHECK(fc1.shape == std::vector<uint64_t>{2 * d.ffn, d.hidden});
  CHECK(fc1.gated);
  CHECK(fc1.muon_eligible());
  CHECK(spec.params[3].shape == std::vector<uint64_t>{d.hidden, d.ffn});
  CHECK(spec.params[1].role == Role::vector);
  CHECK(spec.params[spec.params.size() - 2].name == "final_norm.weight");
  CHECK(spec.params.back().role == Role::output);
  CHECK(spec.params.back().shape == std::vector<uint64_t>{d.output, d.hidden});
  int muon = 0;
  for (const auto& p : spec.params) {
    CHECK(p.dtype == DType::BF16);
    muon += p.muon_eligible() ? 1 : 0;
  }
  CHECK(muon == int(2 * d.layers));
  CHECK(spec.find("blocks.3.fc2.weight") == int64_t(spec.params.size()) - 3);
  CHECK(spec.find("nope") == -1);
}

TEST_CASE("keep-fp32 marks params by regex search", "[model]") {
  ModelSpec spec = preset("tiny");
  CHECK(mark_keep_in_fp32(spec, "norm") == spec.network->layers + 1);
  for (const auto& p : spec.params) {
    const bool norm = p.name.find("norm") != std::string::npos;
    CHECK(p.keep_in_fp32 == norm);
    CHECK((p.dtype == DType::F32) == norm);
  }
  CHECK(!check_spec(spec));
  CHECK(mark_keep_in_fp32(spec, "^output\\.") == 1);
  CHECK(!spec.params.back().muon_eligible());
  ModelSpec m = preset("tiny");
  mark_keep_in_fp32(m, "blocks\\.0\\.fc1");
  CHECK(!m.params[2].muon_eligible());  // fp32-kept matrices are not Muon's by default
  CHECK(mark_keep_in_fp32(m, "xyz") == 0);
  CHECK_THROWS_AS(mark_keep_in_fp32(m, "(unclosed"), UsageError);
}

TEST_CASE("check_spec rejects broken specs", "[model]") {
  auto problem = [](ModelSpec s) { return check_spec(s).value_or(SpecProblem{-2, "", ""}); };
  ModelSpec base;
  base.name = "x";
  base.params = {{"w", {4, 8}, DType::BF16, Role::matrix, false, false}, {"b", {8}, DType::BF16, Role::vector, false, false}};
  CHECK(!check_spec(base));

  ModelSpec s = base;
  s.params.clear();
  CHECK(problem(s).field == "params");
  s = base;
  s.params[1].name = "w";
  CHECK(problem(s).field == "name");
  CHECK(problem(s).param == 1);
  s = base;
  s.params[0].shape = {4, 0};
  CHECK(problem(s).field == "shape");
  s = base;
  s.params[1].shape = {2, 4};
  CHECK(problem(s).field == "shape");
  s = base;
  s.params[0].dtype = DType::F16;
  CHECK(problem(s).field == "dtype");
  s = base;
  s.params[0].keep_in_fp32 = true;
  CHECK(problem(s).field == "keep_in_fp32");
  s = base;
  s.params[0].gated = true;
  s.params[0].shape = {5, 8};
  CHECK(problem(s).field == "gated");
  s = base;
  s.network = NetworkDims{1, 2, 3, 1, 1};
  CHECK(problem(s).field == "network");
  CHECK_THROWS_AS(validate_spec(s), UsageError);
  ModelSpec t = preset("tiny");
  std::swap(t.params[2], t.params[3]);
  CHECK(problem(t).field == "network");
}
