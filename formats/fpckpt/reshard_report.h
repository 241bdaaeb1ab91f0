// `reshard` of an fpgather checkpoint behind the format seam (ckpt::Checkpoint::reshard): the target's
// fields checked and parsed, the reshard run (reshard_checkpoint.h), and its plan and outcome as
// `reshard` shows them.
#pragma once

#include <string>

#include "ckpt/checkpoint_reshard.h"

namespace fpg::fpckpt {

ckpt::ReshardReport reshard_report(const std::string& source, const std::string& target, const ckpt::ReshardTarget& t);

}  // namespace fpg::fpckpt
