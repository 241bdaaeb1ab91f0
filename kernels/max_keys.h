// Elementwise encode/decode between F32/BF16 values and the integer keys of comm/max_key.h, on a
// stream: the NCCL backend's NaN-propagating max. Host launchers; pointers are device pointers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace fpg::cuda {

// keys[i] = key of src[i] (src: n elements of dtype F32 or BF16).
void encode_max_keys(DType dtype, const void* src, uint32_t* keys, size_t n, cudaStream_t stream);
// dst[i] = value of keys[i]; dst may not alias keys unless dtype is F32 (then it may, exactly).
void decode_max_keys(DType dtype, const uint32_t* keys, void* dst, size_t n, cudaStream_t stream);

}  // namespace fpg::cuda
