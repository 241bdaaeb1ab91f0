// fp32 <-> bf16 casts on the GPU with the CPU's FPG_HD codecs (core/float_codec.h): RNE, NaN ->
// 0x7FC0, overflow per Overflow (nonsaturating: inf, as torch .to(bfloat16)); bf16 -> fp32 is exact.
// Bit-identical to the CPU (tests/gpu/fp8_cast_test.cpp). Device pointers; n elements.
#pragma once

#include <cstdint>

#include "core/float_codec.h"
#include "kernels/stream.h"

namespace fpg::cuda {

void cast_f32_to_bf16(const float* in, uint64_t n, uint16_t* out, cudaStream_t stream,
                      Overflow policy = Overflow::nonsaturating);
void cast_bf16_to_f32(const uint16_t* in, uint64_t n, float* out, cudaStream_t stream);

}  // namespace fpg::cuda
