// An fp64 re-implementation of the built-in network's forward pass: plain loops, no BLAS, no shared
// code with NetworkCompute. Tests hold the fp32 forward and backward against it (the backward by
// central finite differences of this loss); too slow for anything but small shapes. With
// Compute::bf16 it rounds to bf16 at the forward's rounding points (model/network_compute.h) and
// computes everything else in fp64.
#pragma once

#include <cstdint>
#include <vector>

#include "model/compute_mode.h"
#include "model/network.h"

namespace fpg::model {

// y [batch, output] from x [batch, input]; params in network_params(dims) order, row-major.
void network_forward_reference(const NetworkDims& dims, const std::vector<const double*>& params,
                               const double* x, int64_t batch, double* y, Compute compute = Compute::fp32);

// Mean over the batch×output elements of (y − target)².
double network_loss_reference(const NetworkDims& dims, const std::vector<const double*>& params,
                              const double* x, const double* target, int64_t batch);

}  // namespace fpg::model
