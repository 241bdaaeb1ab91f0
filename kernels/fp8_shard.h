// The shard-aware quantization API of fp8/shard.h on the GPU: the same four steps (partial amax,
// combine, compute scales, cast) and dequantisation, on device pointers, enqueued on a stream. Each
// equals its CPU reference bit for bit (tests/gpu/fp8_shard_test.cpp).
//
// These take one fragment; they build a one-job table (kernels/fp8_batch.h) per call, which costs a
// small host-to-device copy. The copy-back of many fragments uses DeviceBatch directly: one launch
// for all fragments, its table uploaded once.
#pragma once

#include <cstdint>

#include "fp8/delayed.h"
#include "fp8/recipe.h"
#include "fp8/shard.h"
#include "kernels/stream.h"

namespace fpg::cuda::fp8 {

using fpg::fp8::Plan;
using fpg::fp8::ScaleView;

// 1. Folds the amaxes of fragment [start, start+count) into the device grids amax (plan.grid.size()
//    floats) and amax_col (plan.col_grid.size(); null without a columnwise grid). Zero them first.
void partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, float* amax, float* amax_col,
                  cudaStream_t stream);

// 3. Scales from combined device grids; outputs as in fp8::compute_scales (unused ones may be null).
//    Delayed plans throw UsageError, as on the CPU (delayed_update below makes their scale).
void compute_scales(const Plan& p, const float* amax, const float* amax_col, float* scale, float* scale_inv,
                    uint8_t* e8m0, uint8_t* e8m0_col, cudaStream_t stream);

// 4. Casts the fragment into out[0, count) (and out_col for MX columnwise) with the device scale grids.
void cast_fragment(const Plan& p, const ScaleView& s, uint64_t start, uint64_t count, const void* in,
                   uint8_t* out, uint8_t* out_col, cudaStream_t stream);

// Dequantises fragment [start, start+count) of the rowwise (or MX columnwise) data into fp32.
void dequantize_fragment(const Plan& p, const ScaleView& s, uint64_t start, uint64_t count, const uint8_t* q,
                         float* out, bool columnwise, cudaStream_t stream);

// Delayed scaling, steps 2 and 3 of fp8/delayed.h for n tensors in one launch: for tensor i,
// history[i*L .. i*L+L) gets amax[i] folded into slot 0 (delayed_record), then scale[i] and
// scale_inv[i] are updated from it and the history rolls (delayed_update). All pointers are device
// pointers; `amax` may be null (nothing recorded). Throws UsageError for the CPU's bad configs and
// for histories longer than 8192.
void delayed_update(const fpg::fp8::DelayedConfig& c, size_t n, const float* amax, float* history, float* scale,
                    float* scale_inv, cudaStream_t stream);

// The MX GEMM layout (fp8/mx_swizzle.h) on the device: compact grid -> 128x4-tile swizzled bytes,
// pads zeroed. Columnwise transposes the [M/32, K] grid to [K, M/32] first, as cuBLAS reads it.
// `out` holds mx_swizzled_shape(...).size() bytes.
void mx_swizzle_rowwise(const Plan& p, const uint8_t* compact_row, uint8_t* out, cudaStream_t stream);
void mx_swizzle_columnwise(const Plan& p, const uint8_t* compact_col, uint8_t* out, cudaStream_t stream);

}  // namespace fpg::cuda::fp8
