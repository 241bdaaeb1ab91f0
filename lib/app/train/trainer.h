// `fpgather train` as a library: N DP ranks (threads of this process, or one per mpirun process with
// TrainOptions::comm "mpi"), each running a RankPipeline (pipeline/rank_pipeline.h) over the built-in
// network and the teacher task (model/teacher_task.h). The loop itself (run_training) is the one
// every backend runs: train() gives it host ranks, app/train/device_trainer.h GPU ranks.
//
// Data: at step t, rank r runs micro-batches micro_batch_index(t, dp, r, accumulation, a) for
// a = 0..accumulation-1, so the data order depends only on (seed, step) — the data cursor is the
// step number (TrainCursor). The reported loss of a step is the mean, over all dp·accumulation
// micro-batches, of each micro-batch's mean loss, summed in double in micro-batch index order
// (rank-major), taken on the params the step starts from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/group.h"
#include "model/compute_mode.h"
#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/rank_pipeline.h"

namespace fpg::app::train {

// Bounds on the sizes of a run (training_spec refuses more). The metrics of every step are kept
// (TrainResult::steps), about 100 bytes each; each rank keeps one loss per micro-batch; a micro-batch's
// activations are rows x the widest layer (input, hidden, 2 x ffn or output) floats each.
constexpr uint64_t kMaxTrainSteps = 10'000'000;
constexpr uint64_t kMaxAccumulation = 65536;
constexpr int64_t kMaxMicroBatch = int64_t{1} << 20;
constexpr uint64_t kMaxActivationElements = uint64_t{1} << 31;

struct TrainOptions {
  model::ModelSpec spec;  // must describe the built-in network (spec.network set)
  uint32_t dp = 2;
  pipeline::PipelineConfig pipeline;  // optimizer, hyperparameters, FP8, layout, clipping
  // `--keep-fp32 REGEX`: params whose name matches become fp32-kept (model::mark_keep_in_fp32);
  // empty: none beyond what the spec says.
  std::string keep_fp32;
  // `--fp32-matrices REGEX`: matrices whose name matches become fp32-kept and stay with the layer-wise
  // optimizer (app/train/fp32_params.h); set pipeline.fp32_matrices with it. Empty: none.
  std::string fp32_matrices;
  uint64_t steps = 200;        // at most kMaxTrainSteps
  int64_t micro_batch = 32;    // rows; at most kMaxMicroBatch, and kMaxActivationElements a layer
  uint64_t accumulation = 1;   // micro-batches per rank per step; at most kMaxAccumulation
  uint64_t seed = 1234;       // student init, teacher and data
  size_t threads_per_rank = 1;  // ThreadPool of each rank's batched FP8 passes
  // Communicator backend (comm/group.h, make_host_group): "threads", or "mpi" when every process of
  // an `mpirun -n dp` job runs train() as one rank.
  std::string comm = "threads";
  // --device cuda only (app/train/device_trainer.h, pipeline/device/bucket_sync.h): start each bucket's grad
  // reduce-scatter as soon as the backward has produced its grads, and leave the param all-gathers
  // in flight until the next forward first reads each bucket. train::training_spec refuses them (the
  // CPU pipeline's phases are synchronous). Results do not depend on them.
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  // `--compute`: the network's arithmetic (model/compute_mode.h), the teacher's targets included.
  // The optimizer, the masters and the stored params are the same in every mode.
  model::Compute compute = model::Compute::fp32;
};

// What a resumed run needs besides the rank states: where the data stream stands. The data is a
// pure function of (seed, micro-batch index), so there is no other RNG state.
struct TrainCursor {
  uint64_t seed = 0;
  uint64_t next_step = 0;  // optimizer steps (taken or skipped) so far
  int64_t micro_batch = 0;
  uint64_t accumulation = 1;
  uint32_t dp = 1;
};

struct StepMetrics {
  uint64_t step = 0;       // 0-based
  double loss = 0;         // see above
  double grad_norm = 0;
  float clip_coef = 1.0f;
  bool skipped = false;
  pipeline::PhaseTimes times;  // rank 0's
};

struct TrainSummary {
  double initial_loss = 0;  // loss of step 0 (the initial params)
  double final_loss = 0;    // loss of the last step
  uint64_t steps = 0;       // steps this run took
  uint64_t first_step = 0;  // > 0 when resumed from a checkpoint
  uint32_t dp = 0;
  uint64_t params = 0;      // elements of the spec
  uint64_t skipped = 0;
  double step_time_ms = 0;  // median over steps of rank 0's step time
  pipeline::PhaseTimes median_times;  // per phase, median over steps (seconds)
};

struct TrainResult {
  // Whether this process hosts rank 0 (always with threads): only then are steps and summary filled.
  bool has_rank0 = false;
  std::vector<StepMetrics> steps;
  TrainSummary summary;
  TrainCursor cursor;
};

// Called on every rank's own thread: after the pipeline is built (steps_done = 0, or the resumed
// step) and after every step (steps_done = t + 1). Observers may read the pipeline (tests snapshot
// it) but not step it. Pipeline: the rank's pipeline type (pipeline::RankPipeline, or
// device::DeviceRankPipeline for a GPU run).
template <class Pipeline>
using Observer = std::function<void(uint64_t steps_done, const Pipeline& rank)>;
using RankObserver = Observer<pipeline::RankPipeline>;
// Called on rank 0's thread after every step (progress, metrics files); under mpi only in rank 0's
// process.
using StepCallback = std::function<void(const StepMetrics& m)>;

// What a checkpointing caller (app/checkpoint/checkpointing.h) plugs into train(). Both run on every rank's
// own thread and may use the communicator (saving is a collective), every rank alike.
struct TrainHooks {
  // The initial fp32 values of each param (`--init FILE`); unset: the seeded initializer. Called on
  // every rank's own thread for the params it updates.
  pipeline::InitFn init;
  // After the pipeline is built, before the first step: restore a saved state into `rank` and
  // return the steps it had taken (its cursor's next_step); the run then takes steps
  // [that, opts.steps) and the observer first sees steps_done = that. Unset: start at step 0.
  std::function<uint64_t(pipeline::RankPipeline& rank, comm::Communicator& comm)> resume;
  // After every step (steps_done = t + 1), after the observer: e.g. save every N steps. Must not
  // change the pipeline (a run that saves equals one that does not, bitwise).
  std::function<void(uint64_t steps_done, const pipeline::RankPipeline& rank, comm::Communicator& comm)> after_step;
};

// Throws UsageError for unusable options (no network in the spec, dp 0, micro_batch < 1, …, and
// the pipeline's own checks such as muon with --dist-opt bucketed).
// A resumed run's result holds only the steps it took (StepMetrics::step is the global index) and
// summary.first_step says where it began.
TrainResult train(const TrainOptions& opts, const RankObserver& observer = {}, const StepCallback& on_step = {},
                  const TrainHooks& hooks = {});

// One rank of a training run, on the backend that runs its steps: the host pipeline (train()) or a
// GPU (app/train/device_trainer.h). run_training drives every rank through it alike.
class TrainingRank {
 public:
  virtual ~TrainingRank() = default;
  // Restores a saved state (the run's resume hook) and returns the steps it had taken; 0 without one.
  virtual uint64_t resume() = 0;
  // Step t: the forward/backward of this rank's micro-batches of step t and the pipeline step.
  // all_losses gets every rank's micro-batch losses of the step (rank-major, dp · accumulation).
  virtual pipeline::StepReport step(uint64_t t, std::vector<float>& all_losses) = 0;
  // The run's observer: after the rank is built or resumed, and after every step.
  virtual void observe(uint64_t steps_done) = 0;
  // The run's after_step hook: after every step, after observe.
  virtual void after_step(uint64_t steps_done) = 0;
};
// Builds the TrainingRank of comm's rank, on that rank's thread; init: the initial param values.
using MakeTrainingRank =
    std::function<std::unique_ptr<TrainingRank>(comm::Communicator& comm, const pipeline::InitFn& init)>;

// The training loop: runs `group`, each rank building its TrainingRank and taking steps from its
// resume point to o.steps; rank 0 reports every step to on_step and into the result. spec: the
// model trained (training_spec); init: the initial values, unset for the seeded initializer.
// UsageError when a resumed state has taken more than o.steps steps. Where a signal can stop the
// process (core/interrupt.h), every rank agrees before each step whether one arrived, and all throw
// Interrupted("stopped after step T of N") at the same step.
TrainResult run_training(const TrainOptions& o, const model::ModelSpec& spec, comm::CommunicatorGroup& group,
                         const pipeline::InitFn& init, const MakeTrainingRank& make_rank,
                         const StepCallback& on_step);

// The JSON line of one step (metrics file) and the summary object, as `--json` prints them.
std::string step_json(const StepMetrics& m);
std::string summary_json(const TrainSummary& s);

}  // namespace fpg::app::train
