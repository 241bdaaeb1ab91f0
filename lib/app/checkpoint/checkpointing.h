// `fpgather train --save DIR --save-every N --load DIR --init FILE --ckpt-layout bucket|model
// --compress C --keep N` as a library: train::train() (trainer.h) with its resume and save hooks filled in.
//
// Save (collective, after the steps that are due): rank 0 creates the staging directory beside
// DIR/step-NNNNNNNN and shares its path; every rank writes its own data file (app/checkpoint/state_save.h)
// and hands its manifest to rank 0 (Communicator::gather_bytes); rank 0 merges them with the
// documents (app/checkpoint/state_documents.h), commits atomically, replaces DIR/latest and applies --keep.
// The save only reads the pipeline: a run that saves equals one that does not, bitwise. If any rank
// fails before the commit, the group aborts, the staging directory is removed, and DIR/latest still
// names the previous complete checkpoint.
//
// Init: --init FILE starts a new run (step 0) from safetensors weights instead of the seeded
// initializer (app/train/safetensors_init.h), checked against the model before any rank starts; not
// with --load.
//
// Recovery: before anything is loaded or saved, the --save root and a --load root are recovered
// from killed saves (ckpt/state_store.h, StateStore::recover: stale staging directories and cut-short deletions
// removed, a committed checkpoint newer than `latest` adopted or set aside).
//
// Load: --load names a checkpoint or a root holding `latest`. The checkpoint must pass validation's
// index checks (index checksum, coverage, files, layout: StateStore::open, exit 1 with the
// problems), so missing state is never resumed as zeros. Before anything is read, every rank
// checks that the checkpoint describes this run (check_resumable: UsageError, exit 2, naming what
// differs); then it restores its share (app/checkpoint/state_load.h) and the run continues at the saved
// cursor up to --steps (the step count to reach).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/chunk_codec.h"
#include "ckpt/key_names.h"
#include "model/model_spec.h"
#include "app/checkpoint/rank_state_access.h"
#include "app/train/trainer.h"

namespace fpg::app::checkpoint {

struct CheckpointOptions {
  std::string save;         // --save DIR: the checkpoint root (created if missing); empty: never save
  uint64_t save_every = 0;  // --save-every N: save after every N-th step too; 0: only after the last
  std::string load;         // --load DIR: resume from it; empty: start from the initial params
  std::string init;         // --init FILE: initial params from safetensors (app/train/safetensors_init.h)
  ckpt::StateLayout layout = ckpt::StateLayout::model;  // --ckpt-layout
  ckpt::Compression compression;                        // --compress (default zstd:1)
  size_t keep = 0;          // --keep N: keep the N newest checkpoints of `save` (0: all)
  uint64_t chunk_bytes = 4ull << 20;
  // Called on rank 0's thread as a load or a save begins and ends ("loading DIR", "saving DIR"): a
  // progress display names what the run is doing while no step advances.
  std::function<void(const std::string& phase)> on_phase;
  // Fault injection for tests: called on every rank after it wrote its data, before its file is
  // finished (a throw is a crash in the middle of a save).
  std::function<void(uint32_t rank, uint64_t step)> before_finish;
};

// What a checkpointed run did besides training.
struct CheckpointLog {
  std::string loaded;                // the checkpoint directory resumed from ("" if none)
  uint64_t loaded_step = 0;          // its cursor
  uint64_t loaded_chunks = 0;        // chunks read from it by all ranks (each once: state_load.h)
  uint64_t loaded_bytes = 0;         // their stored bytes
  std::vector<std::string> saved;    // checkpoint directories committed, in order
  std::vector<std::string> removed;  // names --keep removed
  std::vector<std::string> recovered;  // what crash recovery did in the roots (StateStore::recover)
  // Wall seconds, for benchmarks against other checkpointers: each save in `saved`, from staging to
  // every rank past the commit; the load, from opening the index to the slowest rank's state restored.
  std::vector<double> save_seconds;
  double load_seconds = 0;
};

struct CheckpointedResult {
  train::TrainResult train;
  CheckpointLog checkpoints;
};

// "step-00000042": checkpoint names sort by step.
std::string checkpoint_name(uint64_t step);

// The run a `--load DIR` continues, read before it starts: DIR recovered from killed saves first
// (where it is a root), `latest` resolved, the index validated as for loading.
struct SavedRun {
  std::string dir;              // the checkpoint directory
  train::TrainOptions run;      // its configuration (run_from_documents); steps: its cursor's next_step
  std::vector<std::string> recovered;  // what recovery did in DIR
};
// FormatError for a path without a committed checkpoint or an index that is not a training one,
// InvalidCheckpoint (exit 1) for one that fails validation's index checks.
SavedRun read_saved_run(const std::string& load);

// Whether a save is due after `steps_done` of a run to `steps`.
bool save_due(const CheckpointOptions& c, uint64_t steps_done, uint64_t steps);

// train::train(opts, observer, on_step) with loading and saving as above. UsageError for options that
// cannot work (--save-every without --save, a --save root whose parent is missing, a checkpoint of
// another run, --init with --load, an --init file that does not match the model), FormatError for
// an unreadable checkpoint or --init file.
CheckpointedResult train_with_checkpoints(const train::TrainOptions& opts, const CheckpointOptions& ckpt,
                                          const train::RankObserver& observer = {}, const train::StepCallback& on_step = {});

// The same loading and saving for any trainer whose ranks expose a RankStateAccess (the CPU
// pipeline in place; a GPU rank through its host mirror, app/train/device_trainer.h): the hooks it
// calls on every rank's own thread, as train::TrainHooks says.
struct CheckpointHooks {
  pipeline::InitFn init;  // --init: the initial fp32 values of each param; unset: the seeded initializer
  // After the pipeline is built: restore the saved state, return its cursor's next_step.
  std::function<uint64_t(RankStateAccess& rank, comm::Communicator& comm)> resume;
  // After every step, after the observer; reads the rank only.
  std::function<void(uint64_t steps_done, const RankStateAccess& rank, comm::Communicator& comm)> after_step;
};
using CheckpointedRun = std::function<train::TrainResult(const CheckpointHooks& hooks)>;

// Checks the options, opens --load and --init (`spec`: the model the run trains, asked only for
// --init), runs `run` with the hooks and returns its result with the log. Throws as above.
CheckpointedResult run_with_checkpoints(const train::TrainOptions& opts, const CheckpointOptions& ckpt,
                                        const std::function<model::ModelSpec()>& spec, const CheckpointedRun& run);

}  // namespace fpg::app::checkpoint
