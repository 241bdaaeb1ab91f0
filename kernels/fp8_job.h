// The GPU form of fp8::FragmentJob: one fragment of one tensor, with the plan's geometry flattened to
// plain fields and device pointers, as the FP8 kernels read it from a descriptor table in device
// memory (kernels/fp8_batch.h). Plain C++: lib/ and cmd/ code builds these without CUDA.
#pragma once

#include <cstdint>

#include "fp8/batch.h"
#include "fp8/recipe.h"
#include "fp8/shard.h"

namespace fpg::cuda::fp8 {

struct DeviceJob {
  uint64_t M = 0, K = 0;          // the tensor as the matrix (M, K)
  uint64_t start = 0, count = 0;  // the fragment [start, start+count)
  uint64_t grid_cols = 0;         // columns of the main grid (plan.grid.cols)
  uint8_t scaling = 0;            // fpg::fp8::Scaling
  uint8_t format = 0;             // fpg::fp8::Format
  uint8_t input = 0;              // fpg::fp8::Input
  uint8_t mx_rule = 0;            // fpg::fp8::MxRule
  uint8_t has_row = 0, has_col = 0;
  uint8_t vec = 1;                // elements per vector access: 16 bytes (4 fp32, 8 bf16) or 1
  uint8_t band_shift = 0;         // log2 of the tensor rows per main-grid row (blockwise, MX rowwise)
  uint8_t block_shift = 0;        // log2 of the columns per main-grid cell
  uint8_t pow2 = 0;               // recipe.pow2 (fused jobs)
  uint8_t fused = 0;              // one pass (make_fused_job): kFusedRows or kFusedTiles
  float epsilon = 0;              // recipe.amax_epsilon (fused jobs)
  const void* in = nullptr;       // element `start`, in the plan's input type
  float* amax = nullptr;          // the tensor's full amax grids (partial amax folds in)
  float* amax_col = nullptr;
  const float* scale = nullptr;   // the tensor's full scale grids (cast)
  const uint8_t* e8m0 = nullptr;
  const uint8_t* e8m0_col = nullptr;
  uint8_t* out = nullptr;         // the fragment's output slices, count bytes each (cast)
  uint8_t* out_col = nullptr;
  float* scale_out = nullptr;     // fused jobs: the scale grids they write
  float* scale_inv_out = nullptr;
  uint8_t* e8m0_out = nullptr;
  uint8_t* e8m0_col_out = nullptr;  // fused MX rowwise + columnwise jobs
};

// DeviceJob::fused: whole row blocks (MX rowwise-only, 1x128) or whole 2-D tiles (128x128, MX with
// columnwise scales).
constexpr uint8_t kFusedRows = 1, kFusedTiles = 2;

// The device pointers of a tensor's scale grids (the GPU ScaleView): scale and scale_inv per cell, or
// the compact E8M0 grids for MX.
using fpg::fp8::ScaleView;

// Builds the descriptor of fragment [start, start+count) of plan `p`. All pointers are device
// pointers; the ones a pass does not use may be null. The vector width is chosen here: 16-byte
// accesses when K is a multiple of it and the tensor's first element (in - start) and the outputs'
// element 0 (out - start) are aligned, else element by element. Throws InternalError for a fragment
// outside the tensor.
DeviceJob make_device_job(const fpg::fp8::Plan& p, uint64_t start, uint64_t count, const void* in,
                          float* amax, float* amax_col, const ScaleView& scales, uint8_t* out,
                          uint8_t* out_col);

// A job that quantizes its fragment in ONE pass (can_fuse says which fragments qualify): each
// block's amax (folded into `amax` / `amax_col` when not null), its scale (e8m0 / e8m0_col, or scale
// and scale_inv, any may be null) and its bytes (out, out_col), reading the input once. Equal to
// partial amax + compute_scales + cast of the fragment (fp8::mx_quantize_rowwise_fused for MX
// rowwise). Its DeviceBatch::cast does it all; throws InternalError for other recipes or fragments,
// and for tile jobs whose input or outputs are not 16-byte vectorisable.
DeviceJob make_fused_job(const fpg::fp8::Plan& p, uint64_t start, uint64_t count, const void* in, float* amax,
                         float* amax_col, float* scale, float* scale_inv, uint8_t* e8m0, uint8_t* e8m0_col,
                         uint8_t* out, uint8_t* out_col);
// The rowwise-only form.
DeviceJob make_fused_job(const fpg::fp8::Plan& p, uint64_t start, uint64_t count, const void* in, float* amax,
                         float* scale, float* scale_inv, uint8_t* e8m0, uint8_t* out);

// Whether fragment [start, start+count) of `p` can be fused (alignment aside):
//   MX rowwise-only / blockwise 1x128 (K % 128 == 0): start and count multiples of the block (32 / 128);
//   blockwise 128x128, MX with columnwise scales: whole bands of 128 / 32 rows (start on a band
//   boundary, end on one or at the end of the tensor), K a multiple of 16 bytes of input.
// Fragments that cut a tile keep the partial amax + all-reduce + scales + cast path.
bool can_fuse(const fpg::fp8::Plan& p, uint64_t start, uint64_t count);
// The same with the alignment make_fused_job needs of the input and outputs (device pointers at the
// fragment's first element).
bool can_fuse(const fpg::fp8::Plan& p, uint64_t start, uint64_t count, const void* in, const uint8_t* out,
              const uint8_t* out_col);

// The same from a CPU-style job whose pointers are device pointers.
DeviceJob make_device_job(const fpg::fp8::FragmentJob& j);

}  // namespace fpg::cuda::fp8
