// `fpgather inspect` of a PyTorch DCP / Megatron torch_dist checkpoint directory.
#pragma once

#include <string>

namespace fpg::cli {

// Summary (and the recovered Megatron optimizer layout), --keys, or --key NAME's chunks; as text or JSON.
int inspect_dcp(const std::string& path, bool keys, const std::string& key, bool json);

}  // namespace fpg::cli
