// Initial values of the built-in network's parameters: the student's starting point and the fixed
// teacher it regresses onto. Each parameter is a pure function of (seed, which network, its name,
// the dims), so every rank and every DP layout computes the same values without exchanging them.
//
// Scales (x ~ N(0, 1) inputs; every linear layer y = x·Wᵀ with W [out, in]):
//   input.weight        N(0, 1/input)          the residual stream starts at unit RMS
//   blocks.i.norm, final_norm                  ones
//   blocks.i.fc1        N(0, 1/hidden)         gate and up pre-activations of unit variance
//   blocks.i.fc2        N(0, 1/(ffn·layers))   the blocks together add O(1) to the stream (more
//                                              layers, smaller steps), so no block dominates
//   output.weight       N(0, 1/hidden)         teacher: outputs of unit variance (the final norm
//                                              fixes the scale whatever the depth);
//                       student: scaled by kStudentOutputGain, so its untrained loss is about the
//                       targets' variance (≈ 1) rather than twice that, and it learns the map first
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_spec.h"
#include "model/network.h"
#include "model/param.h"

namespace fpg::model {

enum class NetworkRole : uint8_t { student, teacher };

// The student's output head starts at this fraction of the teacher's scale.
inline constexpr float kStudentOutputGain = 0.1f;

// Fills out[0, p.numel()) with p's initial values. p must be one of network_params(dims) (by name
// and shape); UsageError otherwise.
void init_network_param(const Param& p, const NetworkDims& dims, uint64_t seed, NetworkRole role,
                        float* out);

// Every parameter of `spec` (which must describe the built-in network: spec.network set and the
// params matching it), in spec order, as fp32.
std::vector<std::vector<float>> init_network_params(const ModelSpec& spec, uint64_t seed,
                                                    NetworkRole role);

}  // namespace fpg::model
