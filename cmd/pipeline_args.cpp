#include "pipeline_args.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "cli.h"
#include "comm/threads_backend.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "option_range.h"

namespace fpg::cli {
namespace {

double parse_double(const std::string& s, const std::string& option) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(option + ": '" + s + "' is not a number");
}

fp8::Recipe recipe_from(const PipelineArgs& a) {
  const auto scaling = fp8::parse_scaling(a.fp8);
  if (!scaling)
    throw UsageError("--fp8 must be none, tensorwise, delayed, blockwise, blockwise-1x128 or mxfp8, not '" + a.fp8 + "'");
  const auto format = fp8::parse_format(a.fp8_format);
  if (!format) throw UsageError("--fp8-format must be e4m3 or e5m2, not '" + a.fp8_format + "'");
  const auto rule = fp8::parse_mx_rule(a.mx_scale);
  if (!rule) throw UsageError("--mx-scale must be rceil or floor, not '" + a.mx_scale + "'");
  switch (*scaling) {
    case fp8::Scaling::tensorwise: return fp8::Recipe::tensorwise(*format);
    case fp8::Scaling::delayed: return fp8::Recipe::delayed(*format);
    case fp8::Scaling::blockwise_1x128: return fp8::Recipe::blockwise_1x128(*format);
    case fp8::Scaling::blockwise_128x128: return fp8::Recipe::blockwise_128x128(*format);
    default:  // a trained weight is read rowwise (forward) and columnwise (backward), as TE keeps it
      return fp8::Recipe::mxfp8(*format, *rule, true, true);
  }
}

// "0.001; lion 0.0003, muon 0.003": a default that depends on --optimizer, as `value` gives it for each
// optimizer (with --scalar-optimizer adamw, and muon with lion where that differs), the most common first.
std::string per_optimizer(DefaultsFn defaults, const std::function<std::string(const HyperDefaults&)>& value) {
  using optim::OptimizerKind;
  std::vector<std::pair<std::string, std::string>> by;  // optimizer, value
  for (auto k : {OptimizerKind::adamw, OptimizerKind::adam, OptimizerKind::lion, OptimizerKind::muon})
    by.emplace_back(optim::optimizer_name(k), value(defaults(k, optim::ScalarOptimizer::adamw)));
  const std::string muon_lion = value(defaults(OptimizerKind::muon, optim::ScalarOptimizer::lion));
  if (muon_lion != by.back().second) by.emplace_back("muon with lion", muon_lion);
  std::string common = by.front().second;
  size_t most = 0;
  for (const auto& entry : by) {
    const std::string& v = entry.second;
    const auto n = static_cast<size_t>(std::count_if(by.begin(), by.end(), [&](const auto& e) { return e.second == v; }));
    if (n > most) most = n, common = v;
  }
  std::string others;
  for (const auto& [name, v] : by)
    if (v != common) others += (others.empty() ? "" : ", ") + name + " " + v;
  return others.empty() ? common : common + "; " + others;
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

void add_optimizer_options(CLI::App* cmd, PipelineArgs& a, DefaultsFn defaults) {
  const auto lr = per_optimizer(defaults, [](const HyperDefaults& d) { return number(d.lr); });
  const auto wd = per_optimizer(defaults, [](const HyperDefaults& d) { return number(d.weight_decay); });
  const auto betas = per_optimizer(defaults, [](const HyperDefaults& d) { return number(d.beta1) + "," + number(d.beta2); });
  const auto clip = per_optimizer(defaults, [](const HyperDefaults& d) { return number(d.clip_grad); });
  const char* adjust = defaults(optim::OptimizerKind::muon, optim::ScalarOptimizer::adamw).muon_adjust ==
                               optim::MuonLrAdjust::original
                           ? "original"
                           : "match_rms_adamw";
  with_values(cmd->add_option("--optimizer", a.optimizer, "adamw, adam, lion or muon"),
              {"adamw", "adam", "lion", "muon"})->capture_default_str();
  with_values(cmd->add_option("--scalar-optimizer", a.scalar_optimizer,
                  "With muon: the optimizer of vectors, embeddings and the output head (adamw or lion)"), {"adamw", "lion"})
      ->capture_default_str();
  const double inf = std::numeric_limits<double>::infinity();
  number_range(cmd->add_option("--lr", a.lr, "Learning rate, shared by Muon and its scalar optimizer (default " + lr + ")"),
               0, inf, true);
  cmd->add_option("--betas", a.betas,
                  "B1,B2 of Adam/AdamW/Lion and of muon's scalar optimizer, each at least 0 and less than 1 (default " +
                      betas + ")");
  number_range(cmd->add_option("--eps", a.eps, "Adam/AdamW epsilon (default 1e-08)"), 0, inf);
  number_range(cmd->add_option("--weight-decay", a.weight_decay,
                               "Weight decay: AdamW/Lion/Muon decoupled, Adam L2 (default " + wd + ")"),
               0, inf);
  number_range(cmd->add_option("--momentum", a.momentum, "Muon momentum (default 0.95)"), 0, 1, false, true);
  cmd->add_flag("--nesterov,!--no-nesterov", a.nesterov, "Muon: Nesterov momentum, or plain (default: Nesterov)");
  integer_range(cmd->add_option("--ns-steps", a.ns_steps, "Muon: Newton-Schulz iterations"), 0, pipeline::kMaxNsSteps)
      ->capture_default_str();
  with_values(cmd->add_option("--adjust-lr", a.adjust_lr, std::string("Muon: original or match_rms_adamw (default ") + adjust + ")"),
              {"original", "match_rms_adamw"});
  number_range(cmd->add_option("--clip-grad", a.clip_grad,
                               "Clip the global gradient norm to this; 0: no clipping (default " + clip + ")"),
               0, inf);
}

void add_distributed_options(CLI::App* cmd, PipelineArgs& a) {
  integer_range(cmd->add_option("--dp", a.dp, "Data-parallel ranks"), 1, comm::kMaxThreadsRanks)->capture_default_str();
  with_values(cmd->add_option("--comm", a.comm,
                  "Communicator: threads (ranks are threads) or mpi (one rank per process, under mpirun -n DP); "
                  "nccl: train --device cuda only (device buffers)"), {"threads", "mpi", "nccl"})
      ->capture_default_str();
  with_values(cmd->add_option("--dist-opt", a.dist_opt, "bucketed or layerwise (default: bucketed; layerwise with muon)"),
              {"bucketed", "layerwise"});
  with_values(cmd->add_option("--fp8", a.fp8, "FP8 params: none, tensorwise, delayed, blockwise, blockwise-1x128, mxfp8"),
              {"none", "tensorwise", "delayed", "blockwise", "blockwise-1x128", "mxfp8"})
      ->capture_default_str();
  with_values(cmd->add_option("--fp8-format", a.fp8_format, "e4m3 or e5m2"), {"e4m3", "e5m2"})->capture_default_str();
  with_values(cmd->add_option("--mx-scale", a.mx_scale, "mxfp8 scale rule: rceil (TE) or floor (OCP)"),
              {"rceil", "floor"})->capture_default_str();
  integer_range(cmd->add_option("--amax-history", a.amax_history, "delayed: amax history length"), 1,
                pipeline::kMaxAmaxHistory)
      ->capture_default_str();
  with_values(cmd->add_option("--amax-algo", a.amax_algo, "delayed: most_recent or max"),
              {"most_recent", "max"})->capture_default_str();
  integer_range(cmd->add_option("--bucket-size", a.bucket_size, "Elements per bucket (default: one bucket per buffer)"), 1,
                pipeline::kMaxBucketSize);
  cmd->add_flag("--pad-for-nccl", a.pad_for_nccl, "Pad bucket ends to lcm(dp, 128, 65536)");
}

void add_fp32_options(CLI::App* cmd, PipelineArgs& a) {
  cmd->add_option("--keep-fp32", a.keep_fp32,
                  "Regex: params whose name matches stay native fp32 (matrices among them leave Muon for the scalar "
                  "optimizer)");
  cmd->add_option("--fp32-matrices", a.fp32_matrices,
                  "Regex, layer-wise optimizer only: matrices whose name matches stay native fp32 and with Muon, "
                  "updated and all-gathered in fp32 by their owners");
}

void print_warnings(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) std::fprintf(stderr, "fpgather: warning: %s\n", w.c_str());
}

pipeline::PipelineConfig pipeline_config(const PipelineArgs& a, DefaultsFn defaults, bool validate) {
  pipeline::PipelineConfig c;
  const auto opt = optim::parse_optimizer(a.optimizer);
  if (!opt) throw UsageError("--optimizer must be adamw, adam, lion or muon, not '" + a.optimizer + "'");
  const auto scalar = optim::parse_scalar_optimizer(a.scalar_optimizer);
  if (!scalar) throw UsageError("--scalar-optimizer must be adamw or lion, not '" + a.scalar_optimizer + "'");
  c.optimizer = *opt;
  c.scalar_optimizer = *scalar;
  std::optional<pipeline::DistOpt> dist;
  if (!a.dist_opt.empty()) {
    dist = pipeline::parse_dist_opt(a.dist_opt);
    if (!dist) throw UsageError("--dist-opt must be bucketed or layerwise, not '" + a.dist_opt + "'");
  }
  c.dist_opt = pipeline::resolve_dist_opt(dist, *opt);

  const HyperDefaults d = defaults(*opt, *scalar);
  c.lr = a.lr.value_or(d.lr);
  c.weight_decay = a.weight_decay.value_or(d.weight_decay);
  c.eps = a.eps.value_or(1e-8);  // --eps help says so
  c.beta1 = d.beta1;
  c.beta2 = d.beta2;
  if (!a.betas.empty()) {
    const size_t comma = a.betas.find(',');
    if (comma == std::string::npos) throw UsageError("--betas must be B1,B2, not '" + a.betas + "'");
    c.beta1 = parse_double(a.betas.substr(0, comma), "--betas");
    c.beta2 = parse_double(a.betas.substr(comma + 1), "--betas");
    if (!(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1))
      throw UsageError("--betas must each be at least 0 and less than 1, not '" + a.betas + "'");
  }
  c.clip_grad = a.clip_grad.value_or(d.clip_grad);
  if (a.clip_grad && *a.clip_grad < 0) throw UsageError("--clip-grad must be non-negative");
  c.muon_momentum = a.momentum.value_or(0.95);  // --momentum help says so
  c.muon_nesterov = a.nesterov;
  c.muon_ns_steps = a.ns_steps;
  c.muon_adjust_lr = d.muon_adjust;
  if (!a.adjust_lr.empty()) {
    if (a.adjust_lr == "original") c.muon_adjust_lr = optim::MuonLrAdjust::original;
    else if (a.adjust_lr == "match_rms_adamw") c.muon_adjust_lr = optim::MuonLrAdjust::match_rms_adamw;
    else throw UsageError("--adjust-lr must be original or match_rms_adamw, not '" + a.adjust_lr + "'");
  }

  if (a.fp8 != "none") {
    c.fp8.enabled = true;
    c.fp8.recipe = recipe_from(a);
    c.fp8.amax_history_len = a.amax_history;
    if (a.amax_algo == "max") c.fp8.amax_algo = fp8::AmaxAlgo::max;
    else if (a.amax_algo == "most_recent") c.fp8.amax_algo = fp8::AmaxAlgo::most_recent;
    else throw UsageError("--amax-algo must be most_recent or max, not '" + a.amax_algo + "'");
  }
  if (a.bucket_size && *a.bucket_size == 0) throw UsageError("--bucket-size must be positive");
  c.bucket_size = a.bucket_size;
  c.pad_for_nccl = a.pad_for_nccl;
  c.fp32_matrices = !a.fp32_matrices.empty();
  if (a.dp == 0) throw UsageError("--dp must be at least 1");
  if (validate) pipeline::validate_config(c);
  return c;
}

std::string fp8_label(const PipelineArgs& a) {
  if (a.fp8 == "none") return "none";
  return a.fp8 + " " + a.fp8_format;
}

nlohmann::json fp8_json(const PipelineArgs& a) {
  if (a.fp8 == "none") return nullptr;
  return {{"recipe", a.fp8}, {"format", a.fp8_format}};
}

}  // namespace fpg::cli
