// A model spec: the ordered list of parameters (registration order) that the layouts, optimizers and
// checkpoints work on, and, when it describes the built-in network, that network's dimensions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/network.h"
#include "model/param.h"

namespace fpg::model {

struct ModelSpec {
  std::string name;
  // Set when the params are exactly network_params(*network) (up to dtype and keep_in_fp32), so
  // `train` can build the network; absent for free-form specs.
  std::optional<NetworkDims> network;
  std::vector<Param> params;  // registration order

  uint64_t numel() const;
  // Index of the param named `name`, or -1.
  int64_t find(std::string_view name) const;
};

bool operator==(const ModelSpec& a, const ModelSpec& b);
inline bool operator!=(const ModelSpec& a, const ModelSpec& b) { return !(a == b); }

// A problem found by check_spec: which param (-1: the spec itself), which field, what is wrong.
struct SpecProblem {
  int64_t param = -1;
  std::string field;  // "name", "shape", "dtype", "role", "keep_in_fp32", "gated", "network", "params"
  std::string message;
};

// The first rule the spec breaks, or nothing. Rules: at least one param; names non-empty and unique;
// shape non-empty with every dim >= 1; dtype BF16 or F32; keep_in_fp32 implies F32; matrix,
// embedding and output are 2-D, vector is 1-D; gated only on a matrix with an even row count; if
// `network` is set the params match network_params(*network) in name, shape, role and gated.
std::optional<SpecProblem> check_spec(const ModelSpec& spec);

// Throws UsageError describing check_spec's problem, if any.
void validate_spec(const ModelSpec& spec);

// `--keep-fp32 REGEX`: marks every param whose name contains a match of `regex` (ECMAScript,
// std::regex_search, as grep does) keep_in_fp32 and makes it F32. Returns how many matched.
// An invalid regex is a UsageError; matching nothing is not an error (the caller may warn).
size_t mark_keep_in_fp32(ModelSpec& spec, const std::string& regex);

}  // namespace fpg::model
