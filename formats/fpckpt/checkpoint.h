// fpgather's own checkpoints behind the format seam (ckpt/checkpoint_format.h): a directory holding
// index.h5, or a root holding `latest`. Summary, key listing and validation as `inspect` and
// `validate` show them; parameters through CheckpointParams; stored-key diffs through diff.h.
#pragma once

#include <memory>

#include "ckpt/checkpoint_format.h"

namespace fpg::fpckpt {

std::unique_ptr<ckpt::Format> make_format();

}  // namespace fpg::fpckpt
