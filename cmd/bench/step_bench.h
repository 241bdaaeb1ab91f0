// `fpgather bench step`: where the time of a training step goes, and how close the elementwise
// optimizers come to memory speed.
//
//   phases     the built-in network trained for a few steps at each DP size on thread ranks; per
//              phase, the median over steps of rank 0's time (app/train/trainer.h). On a machine with
//              fewer cores than ranks the ranks share cores, and the phases show it.
//   optimizer  AdamW and Lion over rank 0's owned fragments at the smallest DP size (one
//              multi-tensor call, one thread, as a rank runs it), against a memcpy of the bytes the
//              update must touch, timed in the same process on one thread (the largest shard, so the
//              working set does not sit in the caches): AdamW reads param, grad,
//              exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq (28 B/element); Lion reads
//              param, grad, exp_avg and writes param, exp_avg (20 B/element). GB/s = those bytes /
//              best time; the memcpy copies the same number of bytes (so it reads and writes each
//              once); ratio = optimizer GB/s / memcpy GB/s. A memory-bound update has ratio ≈ 1 or
//              more (it writes fewer bytes than it reads, the copy writes all of them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "pipeline/rank_pipeline.h"

namespace fpg::bench {

struct StepBenchOptions {
  model::ModelSpec spec;  // the built-in network (a preset)
  std::vector<uint32_t> dp = {1, 2, 4};
  uint64_t steps = 3;
  int64_t micro_batch = 32;
  double min_seconds = 0.3;  // per optimizer/memcpy measurement
};

struct StepPhaseRow {
  uint32_t dp = 1;
  double step_ms = 0;
  pipeline::PhaseTimes times;  // seconds, medians over steps
  double initial_loss = 0, final_loss = 0;
};

struct OptimizerRow {
  std::string optimizer;   // "adamw", "lion", "memcpy" (one baseline row per byte count)
  uint32_t dp = 1;         // whose rank-0 fragments
  uint64_t elements = 0;
  uint64_t bytes = 0;      // touched per call
  double best_s = 0, median_s = 0;
  double gbps = 0;
  double ratio_to_memcpy = 0;
};

struct StepBenchResult {
  std::vector<StepPhaseRow> phases;
  std::vector<OptimizerRow> optimizer;
};

StepBenchResult run_step_bench(const StepBenchOptions& o);

}  // namespace fpg::bench
