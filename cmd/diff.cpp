// fpgather diff A B: value-by-value comparison of two checkpoints in model space (by key, over the
// flat extent, padding ignored; bucket-layout state per param where the layouts differ; per
// parameter when either is a PyTorch DCP or Megatron torch_dist checkpoint). Both are validated
// first (index or metadata checks; --no-validate skips them). Exit 0 equal, 1 different or invalid.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "json_output.h"
#include "core/error.h"
#include "core/printable.h"
#include "option_range.h"
#include "app/convert/checkpoint_diff.h"

namespace fpg::cli {
namespace {

struct DiffArgs {
  std::string a, b;
  double rtol = 0, atol = 0;
  size_t max_reports = 5;
  bool no_validate = false;
  std::vector<std::string> ignore;
};

// A value as the report gives it ("0.25", "nan", "-inf") typed: a number where JSON has one, else the text.
nlohmann::json value_json(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(v)) return v;
  return text;
}

int run_diff(const DiffArgs& args, const GlobalOptions& g) {
  ckpt::DiffOptions o;
  o.rtol = args.rtol;
  o.atol = args.atol;
  o.max_reports = args.max_reports;
  o.ignore = args.ignore;
  const app::convert::CheckpointDiff d = app::convert::diff_any(args.a, args.b, o, !args.no_validate, progress_enabled(g));
  const ckpt::DiffReport& rep = d.report;
  const std::string &dir_a = d.dir_a, &dir_b = d.dir_b;
  const int code = rep.equal() ? 0 : 1;
  if (g.json) {
    nlohmann::json j = {{"a", dir_a}, {"b", dir_b}, {"rtol", args.rtol}, {"atol", args.atol},
                        {"equal", rep.equal()}, {"keys_compared", rep.keys_compared}, {"model_space", rep.model_space},
                        {"elements_compared", rep.elements_compared}, {"differences", nlohmann::json::array()}};
    for (const auto& d : rep.diffs) {
      nlohmann::json e = {{"key", d.key}, {"what", d.what}, {"detail", d.detail}, {"differing", d.differing},
                          {"max_abs_diff", d.max_abs}, {"first", nlohmann::json::array()}};
      e["range"] = d.what == "values" ? nlohmann::json{d.lo, d.hi} : nlohmann::json();
      for (const auto& v : d.first) e["first"].push_back({{"index", v.index}, {"a", value_json(v.a)}, {"b", value_json(v.b)}});
      j["differences"].push_back(e);
    }
    print_json(j);
    return code;
  }
  // Keys and details name what the files hold: printed through printable() so that none can forge a line.
  for (const auto& d : rep.diffs) {
    std::printf("%s: %s%s%s\n", printable(d.key).c_str(), printable(d.what).c_str(), d.detail.empty() ? "" : ": ",
                printable(d.detail).c_str());
    if (d.what == "values" && d.max_abs > 0) std::printf("  max |a - b| = %.9g\n", d.max_abs);
    for (const auto& v : d.first)
      std::printf("  [%llu] a=%s b=%s\n", static_cast<unsigned long long>(v.index), printable(v.a).c_str(),
                  printable(v.b).c_str());
  }
  std::printf("%s: %llu keys, %llu elements compared (rtol %g, atol %g)\n",
              rep.equal() ? "equal" : "DIFFERENT", static_cast<unsigned long long>(rep.keys_compared),
              static_cast<unsigned long long>(rep.elements_compared), args.rtol, args.atol);
  return code;
}

}  // namespace

void register_diff(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<DiffArgs>();
  auto* cmd = app.add_subcommand("diff", "Compare two checkpoints (fpgather, PyTorch DCP or Megatron torch_dist) value by value in model space");
  cmd->add_option("A", args->a, "First checkpoint (or a directory holding `latest`)")->required();
  cmd->add_option("B", args->b, "Second checkpoint")->required();
  const double inf = std::numeric_limits<double>::infinity();
  number_range(cmd->add_option("--rtol", args->rtol, "Relative tolerance: |a-b| <= atol + rtol*|b|"), 0, inf)
      ->capture_default_str();
  number_range(cmd->add_option("--atol", args->atol, "Absolute tolerance"), 0, inf)->capture_default_str();
  // Each listed difference is kept in memory until the report is printed.
  integer_range(cmd->add_option("--max-reports", args->max_reports, "First differences listed per key"), 0, 1000000)
      ->capture_default_str();
  cmd->add_option("--ignore", args->ignore,
                  "Leave out keys matching this glob (as the report names them; `*` crosses dots, e.g. "
                  "'optim.param_groups.*'); repeatable")
      ->type_name("KEY_GLOB")
      ->take_all()
      ->allow_extra_args(false);
  cmd->add_flag("--no-validate", args->no_validate,
                "Compare even checkpoints that fail validation's index checks (salvage; gaps and altered indexes are "
                "read as they are)");
  cmd->callback([args, &global, &run] { run = [args, &global] { return run_diff(*args, global); }; });
}

}  // namespace fpg::cli
