// Opens any checkpoint fpgather reads (ckpt/format_registry.h) — its own, a PyTorch DCP or a
// Megatron torch_dist directory, a safetensors model — as a ckpt::ParamSource, so `diff` and
// `convert` treat them alike.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ckpt/checkpoint_format.h"

namespace fpg::app::convert {

// What the checkpoint at `path` holds, by the format that recognises it; nullopt when none does.
std::optional<ckpt::Contents> source_contents(const std::string& path);

using OpenedParams = ckpt::OpenedParams;

// Opens `path` for a command that uses it (`refusing` says what, e.g. "compare it"). With `validate`,
// a checkpoint that fails the checks needing no data is refused with the problems (exit 1).
// FormatError when `path` is no checkpoint or cannot be read; fpg::Error with exit code 1 when a
// Megatron optimizer layout cannot be recovered.
std::unique_ptr<OpenedParams> open_params(const std::string& path, const std::string& refusing, bool validate = true);

}  // namespace fpg::app::convert
