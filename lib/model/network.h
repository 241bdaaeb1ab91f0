// The shape of the built-in training network and the parameters it registers.
//
//   x[input] -> input projection [hidden, input]
//            -> layers x residual block: h += fc2(swiglu(fc1(rmsnorm(h))))
//                 norm weight [hidden], fc1 [2*ffn, hidden] (gated), fc2 [hidden, ffn]
//            -> final rmsnorm [hidden] -> output head [output, hidden]
#pragma once

#include <cstdint>
#include <vector>

#include "model/param.h"

namespace fpg::model {

struct NetworkDims {
  uint64_t input = 0;   // width of the synthetic inputs
  uint64_t hidden = 0;  // residual stream width H
  uint64_t ffn = 0;     // SwiGLU inner width F (fc1 has 2F rows)
  uint64_t layers = 0;  // number of residual blocks
  uint64_t output = 0;  // width of the regression target
};

bool operator==(const NetworkDims& a, const NetworkDims& b);
inline bool operator!=(const NetworkDims& a, const NetworkDims& b) { return !(a == b); }

// The network's parameters in registration order (forward order), all BF16:
//   input.weight [H, input] embedding
//   blocks.{i}.norm.weight [H] vector, blocks.{i}.fc1.weight [2F, H] matrix gated,
//   blocks.{i}.fc2.weight [H, F] matrix
//   final_norm.weight [H] vector, output.weight [output, H] output
std::vector<Param> network_params(const NetworkDims& d);

// Sum of the numels of network_params(d), without building them.
uint64_t network_numel(const NetworkDims& d);

}  // namespace fpg::model
