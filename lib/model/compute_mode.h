// The arithmetic the built-in network's forward and backward run in (`train --compute`).
//
//   fp32  every operand, product and result fp32 (no TF32): the bit-exact reference; the GPU follows
//         it with fp32 GEMMs and the CPU's elementwise expressions.
//   bf16  mixed precision as tensor cores run it: every GEMM reads bf16 operands (the parameters
//         rounded to bf16 — the stored bf16 bits themselves — and the activations and gradients that
//         only feed GEMMs stored in bf16) and accumulates in fp32; the residual stream, the rmsnorm
//         statistics, the outputs, the loss and every parameter gradient stay fp32. The rounding
//         points are listed in model/network_compute.h; the CPU computes the same math with the same
//         rounding (its GEMMs on bf16-exact fp32 values, summed in fp32), so GPU and CPU agree within
//         the GEMMs' summation order.
#pragma once

#include <cstdint>
#include <string>

namespace fpg::model {

enum class Compute : uint8_t { fp32, bf16 };

const char* compute_name(Compute c);

// "fp32" or "bf16"; UsageError naming the accepted values otherwise.
Compute parse_compute(const std::string& name);

// x rounded to the nearest bf16 (ties to even), as an fp32 value; NaN stays NaN, overflow gives inf.
float round_to_bf16(float x);

}  // namespace fpg::model
