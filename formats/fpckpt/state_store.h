// fpgather's own checkpoints as the store of training state (ckpt/state_store.h): what the training
// loop and the conversions of a training checkpoint reach through that seam, made of this folder's
// writer (rank_writer.h, commit.h), reader (reader.h, read_ahead.h), validation (validate.h) and
// recovery (recovery.h).
#pragma once

#include <memory>

#include "ckpt/state_store.h"

namespace fpg::fpckpt {

std::unique_ptr<ckpt::StateStore> make_state_store();

}  // namespace fpg::fpckpt
