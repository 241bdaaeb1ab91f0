// Restoring one rank from a training checkpoint (the inverse of state_save.h) into a pipeline built
// for the same run (check_resumable first): the CPU pipeline, or a GPU rank's host mirror
// (app/checkpoint/rank_state_access.h). Each rank reads only what it saved: the ranges of
// optimizer-state keys it owns (straight into its arenas; `bucket` and `model` state layouts alike)
// and the same ranges of the weights (and the FP8 scale state of params whose element 0 it owns),
// straight into the param buffers; every rank needs the params whole, so each range is then
// broadcast from the rank that read it. The checkpoint is read once in all, not once per rank, and
// memory beyond the pipeline's own is the reader's per-thread chunk buffers. (With a device-memory
// communicator every rank reads the params whole instead.)
//
// The params are READ, not re-derived from the masters by a copy-back: for delayed scaling the saved
// bytes were cast with the scale before the step's amax was recorded, and a copy-back would cast with
// the next scale and record the amax a second time. Reading the bytes, the scale grids and the
// delayed state restores exactly what the run held, for every recipe, so the continuation is
// bitwise (lib/ARCHITECTURE.md invariant 4).
#pragma once

#include "comm/communicator.h"
#include "ckpt/state_store.h"
#include "pipeline/rank_pipeline.h"
#include "app/checkpoint/rank_state_access.h"

namespace fpg::app::checkpoint {

// Overwrites rank's optimizer states, masters, step counts, FP8 scale state and params, then
// decodes the params (RankPipeline::params_loaded). Collective: every rank of `comm` (the
// pipeline's group) calls it. FormatError naming the checkpoint, key and range if something is
// missing, of another dtype or extent, or fails its checksum.
void load_rank_state(const ckpt::StateReader& reader, RankStateAccess& rank, comm::Communicator& comm);
void load_rank_state(const ckpt::StateReader& reader, pipeline::RankPipeline& rank, comm::Communicator& comm);

}  // namespace fpg::app::checkpoint
