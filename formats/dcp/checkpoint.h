// PyTorch DCP and Megatron torch_dist checkpoints behind the format seam (ckpt/checkpoint_format.h):
// a directory holding `.metadata`. Summary and key listing from the metadata (with Megatron's recovered
// optimizer layout), validation as validate.h with the mapping to parameters, parameters through
// DcpParams.
#pragma once

#include <memory>

#include "ckpt/checkpoint_format.h"

namespace fpg::dcp {

std::unique_ptr<ckpt::Format> make_format();

}  // namespace fpg::dcp
