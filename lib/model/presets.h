// Built-in model presets: the built-in network at four sizes.
//
//   name   input hidden  ffn  layers output   params
//   tiny      20     96    96      4     20      114,912   tests; hidden and ffn multiples of 32 (MXFP8
//                                                           takes every matrix), norms leave 64-alignment gaps
//   small    128    320   864     12    128   10,039,360
//   base    1024    768  2048     26   1024  124,276,992
//   1b      2048   2048  5632     29   2048 1,011,937,280
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_spec.h"

namespace fpg::model {

// "tiny", "small", "base", "1b", smallest first.
std::vector<std::string> preset_names();

std::optional<NetworkDims> preset_dims(std::string_view name);

// The preset's spec (name, network dims, network_params); UsageError naming the presets if unknown.
ModelSpec preset(std::string_view name);

// A spec of the built-in network with these dims.
ModelSpec network_spec(std::string name, const NetworkDims& dims);

}  // namespace fpg::model
