// fpgather step: replay one optimizer step on tensors from safetensors files (app/replay/replay_step.h).
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "json_output.h"
#include "core/error.h"
#include "pipeline_args.h"
#include "app/replay/replay_step.h"

namespace fpg::cli {
namespace {

struct StepArgs {
  PipelineArgs pipe;
  std::string params, grads, out;
  std::string scalar_params = "embed|lm_head|output";
  bool force = false;
};

// torch's defaults: Adam/AdamW (lr 1e-3, betas 0.9/0.999, weight decay 0 / 1e-2), Lion (lr 1e-4,
// betas 0.9/0.99, weight decay 0), Muon (lr 1e-3, weight decay 0.1, adjust_lr original).
HyperDefaults step_defaults(optim::OptimizerKind k, optim::ScalarOptimizer scalar) {
  HyperDefaults d;
  switch (k) {
    case optim::OptimizerKind::adamw: d.weight_decay = 1e-2; break;
    case optim::OptimizerKind::lion: d.lr = 1e-4, d.beta2 = 0.99; break;
    case optim::OptimizerKind::muon:
      d.weight_decay = 0.1;
      if (scalar == optim::ScalarOptimizer::lion) d.beta2 = 0.99;
      break;
    default: break;
  }
  return d;
}

int run_step(const StepArgs& a, const GlobalOptions& g) {
  app::replay::ReplayOptions o;
  o.pipeline = pipeline_config(a.pipe, step_defaults);
  o.dp = a.pipe.dp;
  o.scalar_params = a.scalar_params;
  o.keep_fp32 = a.pipe.keep_fp32;
  o.fp32_matrices = a.pipe.fp32_matrices;
  o.comm = a.pipe.comm;
  o.force = a.force;
  o.progress = progress_enabled(g);
  const app::replay::ReplayReport r = app::replay::replay_step_files(a.params, a.grads, a.out, o);
  if (!r.has_rank0) return 0;  // under mpi, rank 0's process reports
  print_warnings(r.warnings);
  if (g.json) {
    const nlohmann::json j = {{"params_file", a.params},  {"grads_file", a.grads},
                              {"out_file", a.out},        {"optimizer", a.pipe.optimizer},
                              {"dp", a.pipe.dp},          {"dist_opt", pipeline::dist_opt_name(o.pipeline.dist_opt)},
                              {"fp8", fp8_json(a.pipe)}, {"params", r.params},
                              {"elements", r.elements},   {"fp8_params", r.fp8_params},
                              {"muon_params", r.muon_params}, {"step_in", r.step_in},
                              {"step_out", r.step_out},   {"skipped", r.skipped},
                              {"grad_norm", std::isfinite(r.grad_norm) ? nlohmann::json(r.grad_norm) : nlohmann::json()},
                              {"clip_coef", r.clip_coef}};
    print_json(j);
    return 0;
  }
  if (r.skipped)
    std::fprintf(stderr, "fpgather: warning: non-finite gradient norm; the step was skipped, %s is the input unchanged\n",
                 a.out.c_str());
  std::printf("%s step %lld -> %lld on %llu params (%llu elements), dp %u, %s, fp8 %s; grad norm %.6g%s\n",
              a.pipe.optimizer.c_str(), static_cast<long long>(r.step_in), static_cast<long long>(r.step_out),
              static_cast<unsigned long long>(r.params), static_cast<unsigned long long>(r.elements), a.pipe.dp,
              pipeline::dist_opt_name(o.pipeline.dist_opt), fp8_label(a.pipe).c_str(), r.grad_norm,
              r.clip_coef < 1.0f ? (", clipped x" + std::to_string(r.clip_coef)).c_str() : "");
  std::printf("wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace

void register_step(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<StepArgs>();
  auto* cmd = app.add_subcommand("step", "Replay one optimizer step on parameters, state and gradients from files");
  cmd->add_option("--params", args->params, "IN.safetensors: fp32 params, optional state, step in __metadata__")
      ->required();
  cmd->add_option("--grads", args->grads, "G.safetensors: one fp32 gradient per param, same names")->required();
  cmd->add_option("--out", args->out, "OUT.safetensors: updated params (fp32 masters), state and step")->required();
  cmd->add_flag("--force", args->force, "Replace an existing OUT (it may be the --params file: every input is read first)");
  add_optimizer_options(cmd, args->pipe, step_defaults);
  add_distributed_options(cmd, args->pipe);
  cmd->get_option("--optimizer")->required()->default_str("");  // a replay must say which update it replays
  cmd->add_option("--scalar-params", args->scalar_params,
                  "Regex: 2-D params whose name matches are embeddings/heads (scalar optimizer, never FP8)")
      ->capture_default_str();
  add_fp32_options(cmd, args->pipe);
  cmd->callback([args, &global, &run] { run = [args, &global] { return run_step(*args, global); }; });
}

}  // namespace fpg::cli
