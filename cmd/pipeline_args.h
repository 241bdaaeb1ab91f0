// The command-line options that `train` and `step` share: optimizer and its torch-named
// hyperparameters, distributed optimizer, FP8 recipe, layout and clipping. Parsing only; the
// defaults of each command are given by the command (train: values that train the built-in network;
// step: torch's own defaults).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/config.h"

namespace fpg::cli {

// Hyperparameter defaults of one command for one optimizer (muon: betas/eps are its scalar
// optimizer's; lr and weight decay are shared by Muon and the scalar optimizer).
struct HyperDefaults {
  double lr = 1e-3, weight_decay = 0, beta1 = 0.9, beta2 = 0.999;
  double clip_grad = 0;  // <= 0: no clipping
  optim::MuonLrAdjust muon_adjust = optim::MuonLrAdjust::original;
};
using DefaultsFn = HyperDefaults (*)(optim::OptimizerKind main, optim::ScalarOptimizer scalar);

struct PipelineArgs {
  std::string optimizer = "adamw";
  std::string scalar_optimizer = "adamw";
  std::string dist_opt;  // empty: bucketed, muon: layerwise
  std::optional<double> lr, eps, weight_decay, momentum, clip_grad;
  std::string betas;  // "B1,B2"
  bool nesterov = true;
  int ns_steps = 5;
  std::string adjust_lr;
  std::string fp8 = "none", fp8_format = "e4m3", mx_scale = "rceil", amax_algo = "most_recent";
  size_t amax_history = 1;
  std::optional<uint64_t> bucket_size;
  bool pad_for_nccl = false;
  uint32_t dp = 1;
  std::string comm = "threads";
  std::string keep_fp32, fp32_matrices;  // regexes; empty: none
};

// --optimizer, --scalar-optimizer, --lr, --betas, --eps, --weight-decay, --momentum,
// --nesterov/--no-nesterov, --ns-steps, --adjust-lr, --clip-grad; their help shows the command's defaults.
void add_optimizer_options(CLI::App* cmd, PipelineArgs& a, DefaultsFn defaults);
// --dp, --comm, --dist-opt, --fp8, --fp8-format, --mx-scale, --amax-history, --amax-algo, --bucket-size,
// --pad-for-nccl.
void add_distributed_options(CLI::App* cmd, PipelineArgs& a);

// --keep-fp32 and --fp32-matrices (app/train/fp32_params.h).
void add_fp32_options(CLI::App* cmd, PipelineArgs& a);

// Prints each warning on stderr as "fpgather: warning: ...".
void print_warnings(const std::vector<std::string>& warnings);

// The config, with the command's defaults for what was not given. UsageError (exit 2) naming the
// option for unknown names, malformed --betas and the like; and, with `validate`, for a config that
// cannot run (pipeline::validate_config). A resume checks the given options against the checkpoint
// before that, so that it can list every conflict.
pipeline::PipelineConfig pipeline_config(const PipelineArgs& a, DefaultsFn defaults, bool validate = true);

// "none" or the recipe's name as the user gave it, for reports.
std::string fp8_label(const PipelineArgs& a);
// The same for --json: null, or {"recipe": "tensorwise", "format": "e4m3"}.
nlohmann::json fp8_json(const PipelineArgs& a);

}  // namespace fpg::cli
