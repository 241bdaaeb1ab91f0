// `reshard` of a Megatron torch_dist checkpoint behind the format seam (ckpt::Checkpoint::reshard):
// the target's fields checked and parsed, the reshard run (megatron_reshard.h), and its target layout
// and outcome as `reshard` shows them.
#pragma once

#include <string>

#include "ckpt/checkpoint_reshard.h"

namespace fpg::dcp {

ckpt::ReshardReport megatron_reshard_report(const std::string& source, const std::string& target,
                                            const ckpt::ReshardTarget& t);

}  // namespace fpg::dcp
