// Opens any checkpoint fpgather reads (ckpt/format_registry.h) — its own, a PyTorch DCP or a
// Megatron torch_dist directory, a safetensors model — as a ckpt::ParamSource, so `diff` and
// `convert` treat them alike.
#pragma once

#include <memory>
#include <string>

#include "ckpt/checkpoint_format.h"

namespace fpg::app::convert {

// Whether `path` is a PyTorch DCP / Megatron torch_dist checkpoint directory.
bool is_dcp_checkpoint(const std::string& path);

using OpenedParams = ckpt::OpenedParams;

// Opens `path` for a command that uses it (`refusing` says what, e.g. "compare it"). With `validate`,
// a checkpoint that fails the checks needing no data is refused with the problems (exit 1).
// FormatError when `path` is no checkpoint or cannot be read; fpg::Error with exit code 1 when a
// Megatron optimizer layout cannot be recovered.
std::unique_ptr<OpenedParams> open_params(const std::string& path, const std::string& refusing, bool validate = true);

}  // namespace fpg::app::convert
