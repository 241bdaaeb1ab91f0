// `fpgather reshard SRC DST` over any checkpoint: the source is opened through the format seam
// (ckpt/format_registry.h) and its format's reshard capability runs (ckpt::Checkpoint::reshard):
// fpgather checkpoints for another DP size, distributed optimizer, state layout, bucket size, padding,
// accumulation, compression or chunk size; Megatron torch_dist checkpoints for another DP size, bucket
// size, padding or form. Options are named by field (ckpt/checkpoint_reshard.h). Stopped by a signal
// (core/interrupt.h), it commits nothing and throws Interrupted("nothing written; TARGET …").
#pragma once

#include <string>

#include "ckpt/checkpoint_reshard.h"

namespace fpg::app::reshard {

ckpt::ReshardReport reshard(const std::string& source, const std::string& target, const ckpt::ReshardTarget& options);

}  // namespace fpg::app::reshard
