#include "app/checkpoint/run_settings.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "app/train/fp32_params.h"
#include "core/error.h"
#include "core/printable.h"
#include "model/spec_json.h"
#include "optim/routing.h"
#include "pipeline/config.h"

namespace fpg::app::checkpoint {
namespace {

// The shortest text that reads back as `v` (0.001, not 0.0010000000000000000208).
std::string number(double v) {
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// A regex that matches exactly the names given: ^(a\.b|c)$.
std::string exact_names_regex(const std::vector<std::string>& names) {
  std::string re = "^(";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) re += '|';
    for (char ch : names[i]) {
      if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) re += '\\';
      re += ch;
    }
  }
  return re + ")$";
}

bool is_matrix(const model::Param& p) { return p.role == model::Role::matrix && p.is_2d(); }

// The spec as compared between runs: fp32-kept marks (and the F32 they imply) are the settings
// --keep-fp32 and --fp32-matrices, not the model's.
std::string model_compared(const model::ModelSpec& spec) {
  model::ModelSpec s = spec;
  for (model::Param& p : s.params)
    if (p.keep_in_fp32) p.keep_in_fp32 = false, p.dtype = DType::BF16;
  return model::spec_to_json(s, -1);
}

}  // namespace

std::vector<RunSetting> run_settings(const train::TrainOptions& opts) {
  train::TrainOptions o = opts;
  // The fp32-kept params the options select; a selection the config refuses is training_spec's to
  // report (the settings then show the spec's own marks).
  try {
    train::apply_fp32_params(o.spec, o.keep_fp32, o.fp32_matrices, o.pipeline);
  } catch (const UsageError&) {
    o.spec = opts.spec;
  }
  std::vector<RunSetting> out;
  auto add = [&out](const std::string& option, const nlohmann::json& v, bool may_change = false) {
    const std::string text = v.is_string() ? v.get<std::string>() : v.is_null() ? "none" : v.is_number_float() ? number(v.get<double>()) : v.dump();
    out.push_back({option, text, {option, text}, v, may_change, text});
  };
  auto add_switch = [&out](const std::string& option, const std::string& negated, bool on) {
    std::vector<std::string> words;
    if (on) words.push_back(option);
    else if (!negated.empty()) words.push_back(negated);
    out.push_back({option, on ? "yes" : "no", words, on, false, on ? "yes" : "no"});
  };
  const pipeline::PipelineConfig& c = o.pipeline;
  out.push_back({"--model", o.spec.name, {"--model", o.spec.name}, o.spec.name, false, model_compared(o.spec)});
  add("--optimizer", optim::optimizer_name(c.optimizer));
  const bool muon = c.optimizer == optim::OptimizerKind::muon;
  if (muon) add("--scalar-optimizer", optim::scalar_optimizer_name(c.scalar_optimizer));
  add("--lr", c.lr, true);
  {
    const std::string betas = number(c.beta1) + "," + number(c.beta2);
    out.push_back({"--betas", betas, {"--betas", betas}, {c.beta1, c.beta2}, false, betas});
  }
  const bool lion_scalars = c.optimizer == optim::OptimizerKind::lion ||
                            (muon && c.scalar_optimizer == optim::ScalarOptimizer::lion);
  if (!lion_scalars) add("--eps", c.eps);
  add("--weight-decay", c.weight_decay, true);
  if (muon) {
    add("--momentum", c.muon_momentum);
    add_switch("--nesterov", "--no-nesterov", c.muon_nesterov);
    add("--ns-steps", c.muon_ns_steps);
    add("--adjust-lr", c.muon_adjust_lr == optim::MuonLrAdjust::original ? "original" : "match_rms_adamw");
  }
  add("--clip-grad", c.clip_grad, true);
  add("--dp", o.dp);
  add("--dist-opt", pipeline::dist_opt_name(c.dist_opt));
  if (!c.fp8.enabled) {
    add("--fp8", "none");
  } else {
    add("--fp8", std::string(fp8::scaling_name(c.fp8.recipe.scaling)));
    add("--fp8-format", std::string(fp8::format_name(c.fp8.recipe.format)));
    if (c.fp8.recipe.scaling == fp8::Scaling::mxfp8) add("--mx-scale", std::string(fp8::mx_rule_name(c.fp8.recipe.mx_rule)));
    if (c.fp8.recipe.scaling == fp8::Scaling::delayed) {
      add("--amax-history", c.fp8.amax_history_len);
      add("--amax-algo", c.fp8.amax_algo == fp8::AmaxAlgo::max ? "max" : "most_recent");
    }
  }
  add("--bucket-size", c.bucket_size ? nlohmann::json(*c.bucket_size) : nlohmann::json());
  if (!c.bucket_size) out.back().words.clear();  // one bucket per buffer: the option left out
  add_switch("--pad-for-nccl", "", c.pad_for_nccl);
  // With fp32_matrices every fp32-kept matrix came from --fp32-matrices (app/train/fp32_params.h).
  std::vector<std::string> kept, matrices;
  for (const model::Param& p : o.spec.params)
    if (p.keep_in_fp32) (c.fp32_matrices && is_matrix(p) ? matrices : kept).push_back(p.name);
  for (const auto& [option, names] : {std::pair{"--keep-fp32", &kept}, std::pair{"--fp32-matrices", &matrices}}) {
    std::string joined;
    for (const auto& n : *names) joined += (joined.empty() ? "" : ",") + n;
    if (names->empty()) {
      out.push_back({option, "none", {}, nullptr, false, "none"});
    } else {
      const std::string re = exact_names_regex(*names);
      out.push_back({option, re, {option, re}, *names, false, joined});
    }
  }
  add("--micro-batch", o.micro_batch);
  add("--accumulation", o.accumulation);
  add("--seed", o.seed);
  return out;
}

nlohmann::json settings_json(const std::vector<RunSetting>& settings) {
  nlohmann::json j = nlohmann::json::object();
  for (const RunSetting& s : settings) {
    std::string key = s.option.substr(2);
    std::replace(key.begin(), key.end(), '-', '_');
    j[key] = s.json;
  }
  return j;
}

std::string settings_command_line(const std::vector<RunSetting>& settings) {
  std::string line;
  for (const RunSetting& s : settings)
    for (const std::string& w : s.words) line += (line.empty() ? "" : " ") + shell_word(w);
  return line;
}

std::vector<SettingConflict> resume_conflicts(const train::TrainOptions& saved, const train::TrainOptions& run,
                                              const std::function<bool(const std::string& option)>& given) {
  const std::vector<RunSetting> a = run_settings(saved), b = run_settings(run);
  auto find = [](const std::vector<RunSetting>& v, const std::string& option) -> const RunSetting* {
    for (const RunSetting& s : v)
      if (s.option == option) return &s;
    return nullptr;
  };
  std::vector<SettingConflict> out;
  std::vector<std::string> options;  // saved's order, then what only `run` has
  for (const RunSetting& s : a) options.push_back(s.option);
  for (const RunSetting& s : b)
    if (!find(a, s.option)) options.push_back(s.option);
  for (const std::string& option : options) {
    const RunSetting *x = find(a, option), *y = find(b, option);
    if ((x && x->may_change) || (y && y->may_change)) continue;
    if (x && y && x->compared == y->compared) continue;
    const char* absent = "no value (the option does not apply)";
    SettingConflict k{option, x ? x->value : absent, y ? y->value : absent};
    // Two specs of one name: say what differs in a word rather than dump them.
    if (option == "--model" && x && y && x->value == y->value) k.saved += " (another spec of that name)";
    out.push_back(std::move(k));
  }
  std::vector<SettingConflict> of_given;
  for (const SettingConflict& k : out)
    if (given(k.option)) of_given.push_back(k);
  return of_given.empty() ? out : of_given;
}

std::string conflicts_message(const std::string& dir, const train::TrainOptions& saved, const train::TrainOptions& run,
                              const std::vector<SettingConflict>& conflicts) {
  std::string m = "cannot resume from " + dir + ": " +
                  (conflicts.size() == 1 ? std::string("1 option differs") : std::to_string(conflicts.size()) + " options differ") +
                  " from the checkpoint's run, which a resumed run keeps (leave " +
                  (conflicts.size() == 1 ? "it" : "them") + " out to take the checkpoint's values):";
  bool layout = false;
  for (const SettingConflict& k : conflicts) {
    m += "\n  " + k.option + ": the checkpoint has " + k.saved + ", this run " + k.run;
    for (const char* o : {"--dp", "--dist-opt", "--bucket-size", "--pad-for-nccl"}) layout |= k.option == o;
  }
  if (layout) {
    std::string extra = " --dp " + std::to_string(run.dp);
    if (run.pipeline.dist_opt != saved.pipeline.dist_opt)
      extra += std::string(" --dist-opt ") + pipeline::dist_opt_name(run.pipeline.dist_opt);
    if (run.pipeline.bucket_size != saved.pipeline.bucket_size)
      extra += " --bucket-size " + (run.pipeline.bucket_size ? std::to_string(*run.pipeline.bucket_size) : std::string("none"));
    if (run.pipeline.pad_for_nccl != saved.pipeline.pad_for_nccl)
      extra += run.pipeline.pad_for_nccl ? " --pad-for-nccl" : " --no-pad-for-nccl";
    // reshard keeps the global batch unless told otherwise; this run's accumulation where that differs
    const uint64_t global = uint64_t{saved.dp} * saved.accumulation;
    if (run.dp == 0 || global % run.dp != 0 || global / run.dp != run.accumulation)
      extra += " --accumulation " + std::to_string(run.accumulation);
    // The target beside the checkpoint root, not in it (where --keep would count it as a checkpoint).
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    std::string target = d;
    if (const size_t slash = d.rfind('/'); slash != std::string::npos && slash > 0)
      target = d.substr(0, slash) + "-" + d.substr(slash + 1);
    m += "\nloading does not reshard: rewrite the checkpoint for this layout with `fpgather reshard " + d + " " +
         target + "-dp" + std::to_string(run.dp) + extra + "` and load that";
  }
  return m;
}

}  // namespace fpg::app::checkpoint
