// A run's settings as train's options (app/checkpoint/run_settings.h): numbers that read back as the
// same doubles, options that do not apply left out, fp32-kept params as exact regexes, and the
// conflicts of a resume listed for the options given.
#include <cstdlib>
#include <string>

#include "app/checkpoint/run_settings.h"
#include "catch.h"
#include "model/spec_json.h"

using namespace fpg;
using app::checkpoint::RunSetting;

namespace {

app::train::TrainOptions tiny() {
  app::train::TrainOptions o;
  o.spec = model::resolve_model("tiny");
  o.dp = 2;
  return o;
}

const RunSetting* find(const std::vector<RunSetting>& v, const std::string& option) {
  for (const RunSetting& s : v)
    if (s.option == option) return &s;
  return nullptr;
}

bool given_none(const std::string&) { return false; }

}  // namespace

TEST_CASE("run settings: values read back exactly, inapplicable options are left out") {
  app::train::TrainOptions o = tiny();
  o.pipeline.lr = 0.1;  // 0.1000000000000000055511151231257827 at 17 digits
  o.pipeline.beta2 = 0.95;
  const auto s = app::checkpoint::run_settings(o);
  REQUIRE(find(s, "--lr")->value == "0.1");
  REQUIRE(std::strtod(find(s, "--lr")->value.c_str(), nullptr) == o.pipeline.lr);
  REQUIRE(find(s, "--betas")->value == "0.9,0.95");
  REQUIRE(find(s, "--betas")->json == nlohmann::json::array({0.9, 0.95}));
  REQUIRE(find(s, "--lr")->may_change);
  REQUIRE_FALSE(find(s, "--dp")->may_change);
  REQUIRE(find(s, "--momentum") == nullptr);    // not muon
  REQUIRE(find(s, "--fp8-format") == nullptr);  // no FP8
  REQUIRE(find(s, "--bucket-size")->json.is_null());
  REQUIRE(find(s, "--bucket-size")->words.empty());
  REQUIRE(app::checkpoint::settings_command_line(s).find("--model tiny --optimizer adamw --lr 0.1") == 0);
}

TEST_CASE("run settings: fp32-kept params as an exact regex of their names") {
  app::train::TrainOptions o = tiny();
  o.keep_fp32 = "norm";
  const auto s = app::checkpoint::run_settings(o);
  const RunSetting* k = find(s, "--keep-fp32");
  REQUIRE(k != nullptr);
  REQUIRE(k->value.rfind("^(", 0) == 0);
  REQUIRE(k->value.find("\\.") != std::string::npos);  // the dots of the names escaped
  REQUIRE(k->json.is_array());
  REQUIRE(k->words.size() == 2);
  REQUIRE(find(s, "--fp32-matrices")->json.is_null());
  // the regex selects the same params again
  app::train::TrainOptions again = tiny();
  again.keep_fp32 = k->value;
  REQUIRE(find(app::checkpoint::run_settings(again), "--keep-fp32")->compared == k->compared);
}

TEST_CASE("resume conflicts: the given options that differ, not those that follow or may change") {
  const app::train::TrainOptions saved = tiny();
  app::train::TrainOptions run = saved;
  run.dp = 3;
  run.pipeline.optimizer = optim::OptimizerKind::lion;  // eps no longer applies
  run.pipeline.lr = 5e-4;                               // may change
  run.seed = 9;
  const auto given = [](const std::string& o) { return o == "--dp" || o == "--optimizer" || o == "--lr"; };
  const auto k = app::checkpoint::resume_conflicts(saved, run, given);
  REQUIRE(k.size() == 2);
  REQUIRE(k[0].option == "--optimizer");
  REQUIRE(k[0].saved == "adamw");
  REQUIRE(k[0].run == "lion");
  REQUIRE(k[1].option == "--dp");
  // nothing given differs, yet the runs do: every difference is listed (the seed, eps)
  const auto all = app::checkpoint::resume_conflicts(saved, run, given_none);
  REQUIRE(all.size() == 4);
  REQUIRE(app::checkpoint::resume_conflicts(saved, saved, given_none).empty());
  const std::string m = app::checkpoint::conflicts_message("r/step-00000008", saved, run, k);
  REQUIRE(m.find("2 options differ") != std::string::npos);
  REQUIRE(m.find("fpgather reshard r/step-00000008 r-step-00000008-dp3 --dp 3 --accumulation 1") != std::string::npos);
}
