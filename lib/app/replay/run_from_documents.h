// The run a training checkpoint describes, rebuilt from its documents (app/checkpoint/state_documents.h): the
// model spec, DP size, distributed optimizer and layout options, optimizer and hyperparameters, FP8
// recipe, data stream. Offline tools that rebuild the pipelines of a saved run (re-encoding a
// checkpoint with another FP8 recipe) start from it; `check` then proves the rebuild by comparing
// the documents the rebuilt run would write with the saved ones.
#pragma once

#include <string>

#include "ckpt/documents.h"
#include "app/train/trainer.h"

namespace fpg::train {

// steps = the saved cursor's next_step. FormatError naming `dir` and the document on a missing or
// malformed field.
TrainOptions run_from_documents(const ckpt::Documents& docs, const std::string& dir);

}  // namespace fpg::train
