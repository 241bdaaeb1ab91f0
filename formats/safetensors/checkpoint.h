// Safetensors models behind the format seam (ckpt/checkpoint_format.h), as read-only checkpoints of
// weights: a .safetensors file, an index .json, or a Hugging Face model directory (holding
// model.safetensors.index.json or model.safetensors). Summary as `inspect` shows a model; validation
// is model.h's header and cross-shard checks, and with data every tensor's bytes read from the disk;
// parameters are the tensors, each a weight under its own name, so two models `diff` tensor by tensor.
#pragma once

#include <memory>

#include "ckpt/checkpoint_format.h"

namespace fpg::safetensors {

std::unique_ptr<ckpt::Format> make_format();

}  // namespace fpg::safetensors
