// fpgather train: the built-in network trained through the distributed-optimizer pipeline on DP
// thread ranks (app/train/trainer.h), or with --device cuda one rank per GPU (app/train/device_trainer.h).
#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "json_output.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/units.h"
#include "core/interrupt.h"
#include "core/progress.h"
#include "app/train/device_trainer.h"
#include "layout/layout_json.h"
#include "model/compute_mode.h"
#include "model/spec_json.h"
#include "option_range.h"
#include "pipeline_args.h"
#include "app/checkpoint/checkpointing.h"
#include "app/checkpoint/run_settings.h"
#include "app/train/metrics_file.h"
#include "app/train/train_setup.h"
#include "app/train/trainer.h"

namespace fpg::cli {
namespace {

struct TrainArgs {
  PipelineArgs pipe;
  std::string model = "tiny";
  uint64_t steps = 200;
  int64_t micro_batch = 32;
  uint64_t accumulation = 1;
  uint64_t seed = 1234;
  std::string metrics;
  bool force = false;  // replace an existing --metrics FILE
  std::string device = "cpu";
  std::string compute = "fp32";  // the network's arithmetic (model/compute_mode.h)
  bool comm_given = false;  // --comm on the command line (cuda implies nccl)
  bool overlap_grad_reduce = false, overlap_param_gather = false;  // --device cuda only
  bool print_layout = false;
  uint64_t log_every = 0;
  // checkpoints (app/checkpoint/checkpointing.h)
  std::string save, load, init;
  uint64_t save_every = 0;
  std::string ckpt_layout = "model";
  std::string compress = "zstd:1";
  size_t keep = 0;
};

app::checkpoint::CheckpointOptions checkpoint_options(const TrainArgs& a) {
  app::checkpoint::CheckpointOptions c;
  c.save = a.save;
  c.load = a.load;
  c.init = a.init;
  c.save_every = a.save_every;
  const auto layout = ckpt::parse_state_layout(a.ckpt_layout);
  if (!layout) throw UsageError("--ckpt-layout must be bucket or model, not '" + a.ckpt_layout + "'");
  c.layout = *layout;
  c.compression = ckpt::parse_compression(a.compress);
  c.keep = a.keep;
  return c;
}

// Values that train the built-in network (model/teacher_task.h): AdamW/Adam lr 1e-3; Lion lr 3e-4
// with betas 0.9/0.99 and weight decay 0.1; Muon lr 3e-3 with match_rms_adamw scaling, so one lr
// serves Muon and its scalar optimizer (Moonlight's rule). Clipping at 1.0, as Megatron.
HyperDefaults train_defaults(optim::OptimizerKind k, optim::ScalarOptimizer scalar) {
  HyperDefaults d;
  d.clip_grad = 1.0;
  d.weight_decay = 1e-2;
  switch (k) {
    case optim::OptimizerKind::adam: d.weight_decay = 0; break;
    case optim::OptimizerKind::lion: d.lr = 3e-4, d.beta2 = 0.99, d.weight_decay = 0.1; break;
    case optim::OptimizerKind::muon:
      d.lr = 3e-3;
      d.muon_adjust = optim::MuonLrAdjust::match_rms_adamw;
      if (scalar == optim::ScalarOptimizer::lion) d.beta2 = 0.99;
      break;
    default: break;
  }
  return d;
}

std::string group_digits(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

// --device cuda: what it does not support is refused before anything runs.
void check_cuda_args(const TrainArgs& a) {
  if (a.comm_given && a.pipe.comm != "nccl")
    throw UsageError("--device cuda runs its ranks on the nccl communicator, not --comm " + a.pipe.comm);
}

// --load: the checkpoint's setting for every option the command line does not give, parsed by the
// options themselves (run_settings writes command-line words). --model is not parsed: the spec comes
// from the checkpoint.
TrainArgs resumed_args(const TrainArgs& given, const CLI::App& cmd, const app::checkpoint::SavedRun& saved) {
  TrainArgs m = given;
  CLI::App parser;
  add_optimizer_options(&parser, m.pipe, train_defaults);
  add_distributed_options(&parser, m.pipe);
  add_fp32_options(&parser, m.pipe);
  parser.add_option("--micro-batch", m.micro_batch);
  parser.add_option("--accumulation", m.accumulation);
  parser.add_option("--seed", m.seed);
  std::vector<std::string> words;
  for (const app::checkpoint::RunSetting& s : app::checkpoint::run_settings(saved.run)) {
    const CLI::Option* o = cmd.get_option_no_throw(s.option);
    if (s.option != "--model" && o && o->count() == 0) words.insert(words.end(), s.words.begin(), s.words.end());
  }
  std::reverse(words.begin(), words.end());  // CLI11 takes the last word first
  try {
    parser.parse(words);
  } catch (const CLI::ParseError& e) {
    throw FormatError(saved.dir + ": the run it records does not fit train's options: " + e.what());
  }
  return m;
}

int run_train(const TrainArgs& given, const CLI::App& cmd, const GlobalOptions& g) {
  // Under mpirun only the process of rank 0 writes metrics and reports (ranks are processes there).
  const bool reporter = comm::launcher_rank() <= 0;
  // From the start: the setup of a large model takes seconds before the first step is done.
  Progress progress("train", given.steps, reporter && progress_enabled(g) && !given.print_layout, ProgressUnit::steps);
  std::optional<app::checkpoint::SavedRun> saved;
  if (!given.load.empty()) {
    progress.phase("reading " + given.load);
    saved = app::checkpoint::read_saved_run(given.load);
  }
  const TrainArgs a = saved ? resumed_args(given, cmd, *saved) : given;
  const bool model_given = cmd.get_option("--model")->count() > 0;
  if (a.device != "cpu" && a.device != "cuda")
    throw UsageError("--device must be cpu or cuda, not '" + a.device + "'");
  const bool cuda = a.device == "cuda";
  if (cuda) check_cuda_args(a);
  if (!cuda && (a.overlap_grad_reduce || a.overlap_param_gather))
    throw UsageError("--overlap-grad-reduce and --overlap-param-gather need --device cuda (the CPU pipeline's "
                     "phases run one after another)");
  app::train::TrainOptions o;
  o.spec = saved && !model_given ? saved->run.spec : model::resolve_model(a.model);
  o.dp = a.pipe.dp;
  o.pipeline = pipeline_config(a.pipe, train_defaults, !saved);
  o.keep_fp32 = a.pipe.keep_fp32;
  o.fp32_matrices = a.pipe.fp32_matrices;
  o.steps = a.steps;
  o.micro_batch = a.micro_batch;
  o.accumulation = a.accumulation;
  o.seed = a.seed;
  o.comm = cuda ? "nccl" : a.pipe.comm;
  o.overlap_grad_reduce = a.overlap_grad_reduce;
  o.overlap_param_gather = a.overlap_param_gather;
  o.compute = model::parse_compute(a.compute);
  // --threads is split over the ranks (each rank's batched FP8 passes); results do not depend on it.
  o.threads_per_rank = g.threads > o.dp ? g.threads / o.dp : 1;
  if (saved) {
    // Every option that changes what the resumed run must keep, listed at once.
    const auto conflicts = app::checkpoint::resume_conflicts(saved->run, o, [&cmd](const std::string& option) {
      const CLI::Option* opt = cmd.get_option_no_throw(option);
      return opt != nullptr && opt->count() > 0;
    });
    if (!conflicts.empty()) throw UsageError(app::checkpoint::conflicts_message(saved->dir, saved->run, o, conflicts));
    pipeline::validate_config(o.pipeline);
  }

  print_warnings(app::train::training_warnings(o));
  if (a.print_layout) {  // the layout of this configuration, then exit without training
    app::train::TrainOptions lo = o;
    if (cuda) lo.comm = "threads";  // the layout does not depend on the communicator
    const pipeline::PipelineLayout l = app::train::training_layout(lo);
    if (g.json) {
      const std::string text = l.layer_wise ? layout::to_json(*l.layer_wise, 2) : layout::to_json(*l.bucketed, 2);
      std::printf("%s\n", text.c_str());
    } else {
      std::printf("%s", pipeline::describe(l).c_str());
    }
    return 0;
  }
  // Refuse a bad configuration before any output (cuda: also no CUDA, more --dp than GPUs).
  const model::ModelSpec spec = cuda ? app::train::device_training_spec(o) : app::train::training_spec(o);
  app::checkpoint::CheckpointOptions ckpt = checkpoint_options(a);
  ckpt.on_phase = [&progress](const std::string& what) { progress.phase(what); };

  std::unique_ptr<app::train::MetricsFile> metrics;
  const app::train::MetricsMode metrics_mode = a.force            ? app::train::MetricsMode::replace
                                               : !a.load.empty() ? app::train::MetricsMode::resume
                                                                 : app::train::MetricsMode::create;
  // Checked by every process before any creates the file; created by the first step (after the
  // ranks' first collective), so that under mpirun no process is refused while the others train.
  if (!a.metrics.empty()) app::train::MetricsFile::check(a.metrics, metrics_mode);
  bool first_step = true;
  uint64_t metrics_steps = 0;  // lines written by this run
  const app::train::StepCallback on_step = [&](const app::train::StepMetrics& m) {
    if (first_step) {
      progress.resume_at(m.step);  // m.step > 0 after --load
      if (!a.metrics.empty() && reporter) {
        metrics = std::make_unique<app::train::MetricsFile>(a.metrics, metrics_mode);
        if (metrics_mode == app::train::MetricsMode::resume) metrics->start_at(m.step);
      }
      first_step = false;
    }
    if (metrics) metrics->write(m), ++metrics_steps;
    progress.advance(1);
    if (a.log_every && ((m.step + 1) % a.log_every == 0 || m.step + 1 == a.steps))
      write_above_progress([&] {
        std::fprintf(stderr, "step %llu/%llu loss %.6f grad_norm %.4g%s\n", static_cast<unsigned long long>(m.step + 1),
                     static_cast<unsigned long long>(a.steps), m.loss, m.grad_norm, m.skipped ? " (skipped)" : "");
      });
  };
  app::checkpoint::CheckpointedResult cr;
  install_interrupt_handlers();  // Ctrl-C and SIGTERM stop the run between steps
  progress.phase("building " + plural(o.dp, "rank") + ", step " + std::to_string(saved ? saved->run.steps + 1 : 1));
  try {
    if (cuda)
      cr = app::train::train_on_device_with_checkpoints(o, ckpt, {}, on_step);
    else
      cr = app::checkpoint::train_with_checkpoints(o, ckpt, {}, on_step);
  } catch (const Interrupted& e) {
    progress.finish();
    if (!metrics || metrics_steps == 0) throw;
    metrics->close();
    throw Interrupted(e.signal(), std::string(e.what()) + "; " + a.metrics + " holds every step finished");
  }
  const app::train::TrainResult& r = cr.train;
  const app::checkpoint::CheckpointLog& log = cr.checkpoints;
  std::vector<std::string> recovered = saved ? saved->recovered : std::vector<std::string>{};
  recovered.insert(recovered.end(), log.recovered.begin(), log.recovered.end());
  progress.finish();  // before the summary: nothing is drawn after it
  if (metrics) metrics->close();
  if (!r.has_rank0) return 0;

  const app::train::TrainSummary& s = r.summary;
  const char* dist = pipeline::dist_opt_name(o.pipeline.dist_opt);
  if (g.json) {
    nlohmann::json j = nlohmann::json::parse(app::train::summary_json(s));
    j["model"] = spec.name;
    j["optimizer"] = a.pipe.optimizer;
    j["dist_opt"] = dist;
    j["device"] = a.device;
    j["compute"] = a.compute;
    j["fp8"] = fp8_json(a.pipe);
    j["lr"] = o.pipeline.lr;
    j["micro_batch"] = a.micro_batch;
    j["accumulation"] = a.accumulation;
    j["seed"] = a.seed;
    j["settings"] = app::checkpoint::settings_json(app::checkpoint::run_settings(o));
    j["overlap"] = cuda ? nlohmann::json{{"grad_reduce", a.overlap_grad_reduce}, {"param_gather", a.overlap_param_gather}}
                        : nlohmann::json();
    j["metrics"] = a.metrics.empty() ? nlohmann::json() : nlohmann::json(a.metrics);
    j["nothing_to_do"] = s.steps == 0;
    j["checkpoints"] = {{"loaded", log.loaded.empty() ? nlohmann::json() : nlohmann::json(log.loaded)},
                        {"loaded_step", log.loaded.empty() ? nlohmann::json() : nlohmann::json(log.loaded_step)},
                        {"loaded_chunks", log.loaded_chunks}, {"loaded_bytes", log.loaded_bytes},
                        {"saved", log.saved}, {"removed", log.removed}, {"recovered", recovered},
                        {"load_seconds", log.loaded.empty() ? nlohmann::json() : nlohmann::json(log.load_seconds)},
                        {"save_seconds", log.save_seconds}};
    print_json(j);
    return 0;
  }
  const pipeline::PhaseTimes& t = s.median_times;
  if (!log.loaded.empty())
    std::printf("resumed from %s at step %llu\n", log.loaded.c_str(), static_cast<unsigned long long>(log.loaded_step));
  if (s.steps == 0) {
    std::printf("nothing to do: the run is at step %llu, the --steps to reach\n",
                static_cast<unsigned long long>(s.first_step));
    return 0;
  }
  std::printf("trained %s (%s params) for %s on dp %u%s: %s, %s, fp8 %s, lr %g%s\n", spec.name.c_str(),
              group_digits(s.params).c_str(), plural(s.steps, "step").c_str(), s.dp,
              cuda ? " (cuda)" : "", a.pipe.optimizer.c_str(), dist, fp8_label(a.pipe).c_str(), o.pipeline.lr,
              a.compute == "fp32" ? "" : (", compute " + a.compute).c_str());
  std::printf("loss %.6f -> %.6f (%.3fx)%s\n", s.initial_loss, s.final_loss,
              s.initial_loss > 0 ? s.final_loss / s.initial_loss : 0.0,
              s.skipped ? (", " + plural(s.skipped, "skipped step")).c_str() : "");
  std::printf("step %.3f ms (median): forward/backward %.3f, reduce-scatter %.3f, optimizer %.3f, copy-back %.3f, "
              "gather %.3f, decode %.3f\n",
              s.step_time_ms, t.forward_backward * 1e3, t.reduce_scatter * 1e3, t.optimizer * 1e3, t.copy_back * 1e3,
              t.gather * 1e3, t.decode * 1e3);
  if (a.overlap_grad_reduce || a.overlap_param_gather)
    std::printf("overlap:%s%s\n", a.overlap_grad_reduce ? " grad reduce-scatter with the backward" : "",
                a.overlap_param_gather ? (a.overlap_grad_reduce ? ", param all-gather with the next forward"
                                                                : " param all-gather with the next forward")
                                       : "");
  if (!a.metrics.empty()) std::printf("wrote %s\n", a.metrics.c_str());
  for (const auto& d : log.saved) std::printf("saved %s\n", d.c_str());
  for (const auto& d : log.removed) std::printf("removed %s (--keep %zu)\n", d.c_str(), a.keep);
  return 0;
}

}  // namespace

void register_train(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<TrainArgs>();
  args->pipe.dp = 2;
  auto* cmd = app.add_subcommand("train", "Train the built-in network through the distributed-optimizer pipeline");
  cmd->add_option("--model", args->model, "Preset (tiny, small, base, 1b) or a JSON spec file")->capture_default_str();
  add_optimizer_options(cmd, args->pipe, train_defaults);
  add_distributed_options(cmd, args->pipe);
  auto* comm_opt = cmd->get_option("--comm");
  with_values(cmd->add_option("--device", args->device,
                  "cpu, or cuda: one rank per GPU (--dp GPUs), the whole step on the device over --comm nccl "
                  "(checkpoints are the CPU's format and bytes)"), {"cpu", "cuda"})
      ->capture_default_str();
  with_values(cmd->add_option("--compute", args->compute,
                              "The network's arithmetic: fp32 (the bit-exact reference), or bf16 (bf16 GEMM operands "
                              "on tensor cores with fp32 accumulation, as mixed-precision training runs; the "
                              "optimizer, masters and stored params unchanged)"),
              {"fp32", "bf16"})
      ->capture_default_str();
  cmd->add_flag("--overlap-grad-reduce", args->overlap_grad_reduce,
                "--device cuda: start each bucket's grad reduce-scatter as soon as the backward has produced its "
                "grads (same results)");
  cmd->add_flag("--overlap-param-gather", args->overlap_param_gather,
                "--device cuda: leave the param all-gathers in flight; the next forward waits each bucket just "
                "before it first reads it (same results)");
  add_fp32_options(cmd, args->pipe);
  // The bounds are the library's (app/train/trainer.h): every step's metrics are kept, every
  // micro-batch's loss, and a micro-batch's activations are rows x the widest layer.
  integer_range(cmd->add_option("--steps", args->steps, "Optimizer steps"), 1, app::train::kMaxTrainSteps)
      ->capture_default_str();
  integer_range(cmd->add_option("--micro-batch", args->micro_batch,
                                "Rows per micro-batch; rows x the widest layer at most 2^31 elements"),
                1, static_cast<uint64_t>(app::train::kMaxMicroBatch))
      ->capture_default_str();
  integer_range(cmd->add_option("--accumulation", args->accumulation, "Micro-batches per rank per step"), 1,
                app::train::kMaxAccumulation)
      ->capture_default_str();
  integer_range(cmd->add_option("--seed", args->seed, "Seed of the student, the teacher and the data"), 0, kNoLimit)
      ->capture_default_str();
  cmd->add_option("--metrics", args->metrics,
                  "Write one JSON line per step to FILE.jsonl: a new file, or with --load the resumed run's, "
                  "continued at the resumed step");
  cmd->add_flag("--force", args->force, "Replace an existing --metrics FILE");
  cmd->add_flag("--print-layout", args->print_layout, "Print the buffer layout of this configuration and exit");
  integer_range(cmd->add_option("--log-every", args->log_every, "Log a line on stderr every N steps (default: never)"), 0,
                kNoLimit);
  cmd->add_option("--save", args->save,
                  "Checkpoint root: save DIR/step-NNNNNNNN after the last step (and see --save-every); what killed "
                  "saves left in it is recovered first");
  integer_range(cmd->add_option("--save-every", args->save_every, "Also save after every N-th step; 0: only after the last"),
                0, kNoLimit);
  cmd->add_option("--load", args->load,
                  "Resume from a checkpoint (or a directory holding `latest`), refused unless it validates; the model, "
                  "optimizer, FP8, layout and data options are the checkpoint's (one given must match it, except "
                  "--lr, --weight-decay and --clip-grad); --steps is the step to reach");
  cmd->add_option("--init", args->init,
                  "Start from safetensors weights (a .safetensors file, an index .json or a directory holding one): "
                  "every param by name and shape, F32/BF16/F16 or FP8 with _scale_inv or _scale")
      ->excludes("--load");
  with_values(cmd->add_option("--ckpt-layout", args->ckpt_layout, "Optimizer state in the checkpoint: model (per param) or bucket"),
              {"model", "bucket"})
      ->capture_default_str();
  cmd->add_option("--compress", args->compress, "Checkpoint compression: zstd[:LEVEL][+shuffle] or none")
      ->capture_default_str();
  integer_range(cmd->add_option("--keep", args->keep,
                                "Keep only the N newest checkpoints under --save (default, 0: all); each removed is "
                                "renamed .NAME.deleting first"),
                0, kNoLimit);
  cmd->callback([args, cmd, comm_opt, &global, &run] {
    args->comm_given = comm_opt->count() > 0;
    run = [args, cmd, &global] { return run_train(*args, *cmd, global); };
  });
}

}  // namespace fpg::cli
