// `reshard --tp N --pp N --ep N` of a Megatron dp_reshardable checkpoint: the distributed optimizer's
// state laid out again for another tensor-, pipeline- and expert-parallel size (and DP size), still
// dp_reshardable.
//
// The model keys are global tensors (DCP loads any chunking of them at any TP × PP), written again in
// the target's pieces. What depends on the parallel layout is the optimizer's bucket space: one group
// per target (TP rank, PP rank), over that rank's local parameters, and with MoE at EP > 1 one per
// (expert TP rank, EP rank, PP rank) over its experts. Each parameter's chunks are cut again for the
// target TP (megatron_parallel.h: tensor_parallel_params: TP axes, gated linear_fc1's w and v halves;
// experts at expert TP = TP), the layers split over the target stages (the source's stages at its own
// PP, else evenly), the experts over the EP ranks (at EP 1 into the dense groups, as Megatron registers
// them there), and each group's buffers laid out as Megatron lays them out (layout/bucketed_layout.h,
// the source's bucket size and padding unless given). A target local parameter's state is its pieces
// of the whole parameter's state (DcpParams), read once per (parameter, state) in blocks of rows and
// held while its fragments are written. Group objects (param_groups) are the source's for the stage
// that holds the same part of the model (FORMAT.md, "Another EP", for expert groups); Megatron replaces
// their parameter lists on load. The common state's optimizer entry follows the target (chained or
// one optimizer).
//
// Megatron-LM's saved args take the target's sizes (its load refuses a dp_reshardable state saved at
// another TP × PP than the run's) and no_save_rng (the saved RNG states are the old ranks': the run
// seeds afresh). Served: models without context parallelism, MoE at expert TP = TP. Memory per
// writer thread: one local parameter's state and a block of its rows (at most 64 MiB).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "formats/dcp/dcp_params.h"
#include "formats/dcp/megatron/megatron_reshard.h"
#include "formats/dcp/reader.h"

namespace fpg::dcp {

// `states`: Megatron's names of the states to write ("param", "exp_avg", …), `role_of` each one's
// role among the DcpParams tensors ("master", "exp_avg", …). UsageError for what this rewrite does
// not serve, naming the reason (context parallelism, an axis that does not divide, layers
// that do not divide over the stages, experts that do not divide over the EP ranks, a DP size EP does
// not divide).
MegatronReshardSummary reshard_model_parallel(const Reader& r, const DcpParams& params,
                                              const std::vector<std::string>& states,
                                              const std::map<std::string, std::string>& role_of,
                                              const MegatronReshardOptions& opts, const std::string& dst);

}  // namespace fpg::dcp
