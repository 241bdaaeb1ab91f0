// The JSON file form of model specs: parsing, round trips, errors naming file and field.
#include <cstdio>
#include <fstream>
#include <string>

#include "catch.h"
#include "core/error.h"
#include "model/presets.h"
#include "model/spec_json.h"

using namespace fpg;
using namespace fpg::model;

namespace {

// The FormatError message for `text`, or "" if it parsed.
std::string error_of(const std::string& text) {
  try {
    parse_spec_json(text, "spec.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a JSON spec with explicit params", "[model]") {
  const ModelSpec s = parse_spec_json(R"({
    "name": "demo",
    "params": [
      {"name": "emb", "shape": [64, 16], "role": "embedding"},
      {"name": "fc1", "shape": [128, 64], "role": "matrix", "gated": true},
      {"name": "scale", "shape": [64], "role": "vector", "keep_in_fp32": true},
      {"name": "bias", "shape": [64], "role": "vector", "dtype": "fp32"},
      {"name": "head", "shape": [3, 64], "role": "output", "dtype": "BF16"}
    ]})",
                                      "demo.json");
  CHECK(s.name == "demo");
  CHECK(!s.network);
  REQUIRE(s.params.size() == 5);
  CHECK(s.params[0].role == Role::embedding);
  CHECK(s.params[0].dtype == DType::BF16);
  CHECK(s.params[1].gated);
  CHECK(s.params[2].keep_in_fp32);
  CHECK(s.params[2].dtype == DType::F32);
  CHECK(s.params[3].dtype == DType::F32);
  CHECK(!s.params[3].keep_in_fp32);
  CHECK(s.numel() == 64 * 16 + 128 * 64 + 64 + 64 + 3 * 64);
}

TEST_CASE("a JSON spec from network dims, and round trips", "[model]") {
  const ModelSpec s = parse_spec_json(
      R"({"network": {"input": 20, "hidden": 96, "ffn": 96, "layers": 4, "output": 20}})", "dir/my-net.json");
  CHECK(s.name == "my-net");
  CHECK(s.params == preset("tiny").params);
  CHECK(*s.network == *preset("tiny").network);

  for (const char* name : {"tiny", "small"}) {
    ModelSpec p = preset(name);
    mark_keep_in_fp32(p, "final_norm|blocks\\.0\\.fc2");
    CHECK(parse_spec_json(spec_to_json(p), "x") == p);
    CHECK(parse_spec_json(spec_to_json(p, -1), "x") == p);
  }
}

TEST_CASE("JSON spec errors are FormatErrors naming the file and the field", "[model]") {
  auto check = [](const std::string& text, const std::string& field) {
    const std::string msg = error_of(text);
    CAPTURE(text, msg);
    CHECK(msg.find("spec.json: ") == 0);
    CHECK(msg.find(field) != std::string::npos);
  };
  check("{\"params\": [", "invalid JSON");
  check("[1, 2]", "expected a JSON object");
  check("{}", "params: missing");
  check(R"({"params": [{"shape": [4], "role": "vector"}]})", "params[0].name: missing");
  check(R"({"params": [{"name": "a", "shape": [4, 0], "role": "matrix"}]})", "params[0].shape[1]");
  check(R"({"params": [{"name": "a", "shape": [4, -1], "role": "matrix"}]})", "params[0].shape[1]");
  check(R"({"params": [{"name": "a", "shape": [], "role": "vector"}]})", "params[0].shape");
  check(R"({"params": [{"name": "a", "shape": "4", "role": "vector"}]})", "params[0].shape");
  check(R"({"params": [{"name": "a", "shape": [4], "role": "bias"}]})", "params[0].role");
  check(R"({"params": [{"name": "a", "shape": [4], "role": "vector", "dtype": "F16"}]})", "params[0].dtype");
  check(R"({"params": [{"name": "a", "shape": [4], "role": "vector", "keep_in_fp32": 1}]})",
        "params[0].keep_in_fp32");
  check(R"({"params": [{"name": "a", "shape": [4], "role": "vector", "keep_in_fp32": true, "dtype": "BF16"}]})",
        "params[0].keep_in_fp32");
  check(R"({"params": [{"name": "a", "shape": [4], "role": "vector", "colour": "red"}]})", "params[0].colour");
  check(R"({"params": [{"name": "a", "shape": [4], "role": "vector"}, {"name": "a", "shape": [4], "role": "vector"}]})",
        "params[1].name");
  check(R"({"params": [{"name": "a", "shape": [4], "role": "matrix"}]})", "params[0].shape");
  check(R"({"params": [{"name": "a", "shape": [3, 4], "role": "matrix", "gated": true}]})", "params[0].gated");
  check(R"({"network": {"input": 2, "hidden": 4, "ffn": 4, "layers": 1}})", "network.output: missing");
  check(R"({"network": {"input": 2, "hidden": 0, "ffn": 4, "layers": 1, "output": 2}})", "network.hidden");
  check(R"({"network": {"input": 2, "hidden": 4, "ffn": 4, "layers": 1, "output": 2},
            "params": [{"name": "a", "shape": [4], "role": "vector"}]})",
        "network");
  check(R"({"name": 7, "params": []})", "name");
}

TEST_CASE("spec files and --model resolution", "[model]") {
  const std::string path = "fpg_model_json_test_spec.json";
  {
    std::ofstream out(path);
    out << spec_to_json(preset("tiny"));
  }
  CHECK(load_spec_file(path) == preset("tiny"));
  CHECK(resolve_model(path) == preset("tiny"));
  CHECK(resolve_model("base").name == "base");
  {
    std::ofstream out(path);
    out << "{\"params\": 3}";
  }
  try {
    load_spec_file(path);
    FAIL("bad file accepted");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()).find(path + ": params") == 0);
  }
  std::remove(path.c_str());
  CHECK_THROWS_AS(load_spec_file("/nonexistent/spec.json"), FormatError);
  CHECK_THROWS_AS(resolve_model("/nonexistent/spec.json"), UsageError);
}
