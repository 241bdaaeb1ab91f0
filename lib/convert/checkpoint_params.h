// Opens any checkpoint fpgather reads — its own (a directory holding index.h5, or a root holding
// `latest`), a PyTorch DCP or a Megatron torch_dist directory (holding `.metadata`) — as a
// ckpt::ParamSource, so `diff` and `convert` treat them alike.
#pragma once

#include <memory>
#include <string>

#include "ckpt/param_source.h"

namespace fpg::convert {

// Whether `path` is a PyTorch DCP / Megatron torch_dist checkpoint directory.
bool is_dcp_checkpoint(const std::string& path);

class OpenedParams {
 public:
  virtual ~OpenedParams() = default;
  virtual const ckpt::ParamSource& params() const = 0;
};

// FormatError when `path` is no checkpoint or cannot be read; fpg::Error with exit code 1 when a
// Megatron optimizer layout cannot be recovered.
std::unique_ptr<OpenedParams> open_params(const std::string& path);

}  // namespace fpg::convert
