// `fpgather validate` of a PyTorch DCP / Megatron torch_dist checkpoint directory.
#pragma once

#include <string>

namespace fpg::cli {

// DCP's rules with interval precision, storage entries inside their files, with `data` every item
// read and decoded; for Megatron, the optimizer layout recovered and the stored padding named.
// Returns the exit code: 0 valid, 1 invalid.
int validate_dcp(const std::string& path, bool data, bool json);

}  // namespace fpg::cli
