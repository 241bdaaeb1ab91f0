// The checked JSON reader: values of each type, and errors that name the document, the field path
// and what was wrong, as FormatErrors (exit 3).
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/json_reader.h"

using namespace fpg;

namespace {

const char* const kSpec = R"({
  "name": "demo",
  "spec": {"params": [{"name": "a", "shape": [4]}, {"name": "b", "shape": [2, 3]},
                      {"name": "c", "shape": [1]}, {"name": "d", "shape": "3x4"}]},
  "dp": 4, "lr": 0.5, "step": -2, "fp32": true, "states": ["master", "exp_avg"], "nothing": null,
  "huge": 4294967296
})";

// The message of the FormatError `f` throws; fails the test if it throws nothing or something else.
template <class F> std::string format_error(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    CHECK(e.code() == ExitCode::io);
    return e.what();
  }
  FAIL("no FormatError");
  return "";
}

}  // namespace

TEST_CASE("JSON reader reads fields of each type along their paths", "[core][json]") {
  const JsonDocument doc(kSpec, "run.json");
  const JsonField r = doc.root();
  CHECK(r.get<std::string>("name") == "demo");
  CHECK(r.get<uint32_t>("dp") == 4);
  CHECK(r.get<uint64_t>("dp") == 4);
  CHECK(r.get<int>("dp") == 4);
  CHECK(r.get<int64_t>("step") == -2);
  CHECK(r.get<double>("lr") == 0.5);
  CHECK(r.get<double>("dp") == 4.0);
  CHECK(r.get<float>("lr") == 0.5f);
  CHECK(r.get<bool>("fp32"));
  CHECK(r.get<std::vector<std::string>>("states") == std::vector<std::string>{"master", "exp_avg"});
  CHECK(r.get<uint64_t>("huge") == 4294967296ull);
  CHECK(r.at("nothing").is_null());
  CHECK(r.has("nothing"));
  CHECK_FALSE(r.has("absent"));
  CHECK(r.get<int>("absent", 7) == 7);
  CHECK(r.get<int>("dp", 7) == 4);

  const JsonField shape = r.at("spec").at("params")[1].at("shape");
  CHECK(shape.path() == "spec.params[1].shape");
  REQUIRE(shape.size() == 2);
  CHECK(shape[1].u64() == 3);
  CHECK(shape[1].path() == "spec.params[1].shape[1]");
}

TEST_CASE("JSON reader errors name the document, the field path and the problem", "[core][json]") {
  const JsonDocument doc(kSpec, "run.json");
  const JsonField r = doc.root();
  const JsonField params = r.at("spec").at("params");

  SECTION("missing field") {
    CHECK(format_error([&] { params[2].at("dtype"); }) == "run.json: spec.params[2].dtype: missing");
    CHECK(format_error([&] { r.get<double>("beta1"); }) == "run.json: beta1: missing");
  }
  SECTION("wrong type") {
    CHECK(format_error([&] { params[3].at("shape").size(); }) == "run.json: spec.params[3].shape: expected an array");
    CHECK(format_error([&] { params[3].get<uint64_t>("shape"); }) ==
          "run.json: spec.params[3].shape: expected a non-negative integer, got \"3x4\"");
    CHECK(format_error([&] { r.get<uint64_t>("step"); }) == "run.json: step: expected a non-negative integer, got -2");
    CHECK(format_error([&] { r.get<int>("lr"); }) == "run.json: lr: expected an integer, got 0.5");
    CHECK(format_error([&] { r.get<bool>("dp"); }) == "run.json: dp: expected true or false, got 4");
    CHECK(format_error([&] { r.get<std::string>("nothing"); }) == "run.json: nothing: expected a string, got null");
    CHECK(format_error([&] { r.get<double>("name"); }) == "run.json: name: expected a number, got \"demo\"");
    CHECK(format_error([&] { r.at("dp").at("x"); }) == "run.json: dp: expected an object");
    CHECK(format_error([&] { r.at("spec").get<std::vector<std::string>>("params"); }) ==
          "run.json: spec.params[0]: expected a string, got {\"name\":\"a\",\"shape\":[4]}");
  }
  SECTION("out of range") {
    CHECK(format_error([&] { r.get<uint32_t>("huge"); }) == "run.json: huge: out of range");
    CHECK(format_error([&] { r.get<int>("huge"); }) == "run.json: huge: out of range");
    CHECK(format_error([&] { params[4]; }) == "run.json: spec.params: no element 4 (size 4)");
  }
  SECTION("unknown keys") {
    CHECK(format_error([&] { params[0].check_keys({"name"}); }) == "run.json: spec.params[0].shape: unknown key");
    params[0].check_keys({"name", "shape"});
  }
  SECTION("the root and invalid JSON") {
    const JsonDocument list("[1, 2]", "list.json");
    CHECK(format_error([&] { list.root().at("a"); }) == "list.json: (document): expected an object");
    const std::string bad = format_error([] { JsonDocument("{\"a\": [", "bad.json"); });
    CHECK(bad.rfind("bad.json: (document): invalid JSON: ", 0) == 0);
  }
  SECTION("long values are cut in messages") {
    const JsonDocument big("{\"s\": \"" + std::string(1000, 'x') + "\"}", "big.json");
    const std::string msg = format_error([&] { big.root().get<int>("s"); });
    CHECK(msg.size() < 200);
    CHECK(msg.find("...") != std::string::npos);
  }
}

TEST_CASE("JSON reader fields stay valid when their document moves", "[core][json]") {
  JsonDocument a("{\"x\": {\"y\": 3}}", "a.json");
  const JsonField y = a.root().at("x").at("y");
  JsonDocument b = std::move(a);
  CHECK(y.u32() == 3);
  CHECK(format_error([&] { y.str(); }) == "a.json: x.y: expected a string, got 3");
  CHECK(b.root().at("x").get<int>("y") == 3);
}
