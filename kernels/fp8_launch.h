// Internal: the modes of the batched FP8 kernels, how a job picks one, and the launchers over a
// descriptor table and task lists that are already in device memory (kernels/fp8_batch.h builds them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/fp8_batch.h"
#include "kernels/stream.h"

namespace fpg::cuda::fp8 {

// Work items per task of each pass, and what an item is:
//   cast and main-grid amax: one vector (16 bytes of input, or 1 element) of one tensor row;
//   MX columnwise amax: one vector of columns down one 32-row band.
// 2048 vectors are one round of a CTA in the fp32 fast modes (256 threads x 8 loads).
constexpr uint32_t kCastTaskItems = 2048;
constexpr uint32_t kAmaxTaskItems = 2048;
constexpr uint32_t kColTaskItems = 256;
constexpr uint32_t kScaleTaskItems = 8192;

// Each mode is its own kernel (per input type, vector width and, for casts, format):
//   tensor:  one scale / one amax per tensor (tensorwise, delayed);
//   rows, rows_mx: cells are row blocks that never straddle rows (1x128 or MX rowwise with K % block == 0),
//            so the cell of flat element g is g >> log2(block) and a block lies in one warp access;
//   tiles:   128x128 with K % 128 == 0: a 128-element piece of a row lies in one cell and one warp
//            access (amax: one shuffle reduction and one atomicMax per piece); the cell by a division;
//   generic: any main grid (128x128, 1x128 with ragged rows), MX columnwise outputs; cells by division;
//   col:     the MX columnwise amax;
//   fused:   make_fused_job's one pass (amax, scale and cast of whole row blocks);
//   fused_tiles, fused_mx_tiles: make_fused_job's one pass over whole 2-D tiles (blockwise 128x128;
//            MX rowwise + columnwise), kernels/fp8_fused_tiles.cu, one task per tile.
enum class AmaxMode : uint8_t { tensor, rows, rows_mx, tiles, generic, col };
enum class CastMode : uint8_t { tensor, rows, rows_mx, tiles, generic, fused, fused_mx, fused_tiles, fused_mx_tiles };

// The modes of a job's passes (host side; make_device_job has set its fields).
AmaxMode amax_mode(const DeviceJob& j);
CastMode cast_mode(const DeviceJob& j);

void launch_partial_amax(const DeviceJob* jobs, const Task* tasks, const std::vector<LaunchGroup>& groups,
                         cudaStream_t stream);
void launch_cast(const DeviceJob* jobs, const Task* tasks, const std::vector<LaunchGroup>& groups,
                 cudaStream_t stream);
// Launches a fused_tiles / fused_mx_tiles group (kernels/fp8_fused_tiles.cu); throws InternalError
// for unvectorised groups (make_fused_job never makes them).
void launch_fused_tiles(const DeviceJob* jobs, const Task* tasks, const LaunchGroup& g, cudaStream_t stream);
// Columns of one task's tile: 128 (blockwise 128x128) or 256 (MX: a 32-row band x 256 columns).
constexpr uint64_t fused_tile_cols(bool mx) { return mx ? 256 : 128; }

void launch_scales(const ScaleJob* jobs, const Task* tasks, uint32_t n, cudaStream_t stream);

// Blocks of a persistent grid for `kernel` at `threads` per block and `smem` bytes of dynamic shared
// memory: enough to fill every SM.
int persistent_blocks(const void* kernel, int threads, size_t smem = 0);

}  // namespace fpg::cuda::fp8
