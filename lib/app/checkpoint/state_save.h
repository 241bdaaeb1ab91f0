// What one rank writes into a training checkpoint: exactly what it owns, so nothing is written twice.
// It reads the rank through app/checkpoint/rank_state_access.h (the CPU pipeline in place, or a GPU rank's host
// mirror), so the bytes do not depend on the device.
//   - optimizer state and fp32 masters of its fragments (bucketed part: ckpt::save_optimizer_state
//     in layout `bucket` or `model`, alignment gaps declared as padding; layer-wise matrices it owns:
//     whole "optimizer/<param>/<state>" keys);
//   - the model weights over the same ranges (every rank holds the gathered params, and the fragments
//     of all ranks tile every param exactly once): "weight/<param>" in the param's dtype, or FP8
//     "fp8/<param>" (+ "/columnwise") bytes as held;
//   - each FP8 param's scale state (identical on every rank) by the rank that owns its element 0:
//     the scale grids the bytes were cast with, and with delayed scaling the amax history and the
//     next scale (ckpt/key_names.h).
#pragma once

#include <cstdint>

#include "ckpt/key_names.h"
#include "ckpt/state_store.h"
#include "pipeline/rank_pipeline.h"
#include "app/checkpoint/rank_state_access.h"

namespace fpg::app::checkpoint {

struct RankSaveOptions {
  ckpt::StateLayout layout = ckpt::StateLayout::model;
  uint64_t piece_elems = 4ull << 20;  // elements per write call of the bucketed state save
};

// Writes rank.state().rank's share into w (a writer for that rank). Reads the pipeline only, in
// place (StateWriter::write_borrowed): the rank's state and params must not change before w.finish()
// returns or w is destroyed.
void save_rank_state(ckpt::StateWriter& w, const RankStateAccess& rank, const RankSaveOptions& opts);
void save_rank_state(ckpt::StateWriter& w, const pipeline::RankPipeline& rank, const RankSaveOptions& opts);

}  // namespace fpg::app::checkpoint
