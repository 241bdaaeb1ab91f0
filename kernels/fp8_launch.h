// Internal: the launchers of the batched FP8 kernels, over a descriptor table and task lists that
// are already in device memory (kernels/fp8_batch.h builds them).
#pragma once

#include <cstdint>

#include "kernels/fp8_batch.h"
#include "kernels/stream.h"

namespace fpg::cuda::fp8 {

// Work items per task of each pass, and what an item is:
//   cast and main-grid amax: one vector (16 bytes of input, or 1 element) of one tensor row;
//   MX columnwise amax: one vector of columns down one 32-row band.
constexpr uint32_t kCastTaskItems = 4096;
constexpr uint32_t kAmaxTaskItems = 4096;
constexpr uint32_t kColTaskItems = 256;
constexpr uint32_t kScaleTaskItems = 8192;

// Tasks [0, n_main) are main-grid amax tasks, [n_main, n) MX columnwise ones.
void launch_partial_amax(const DeviceJob* jobs, const Task* tasks, uint32_t n_main, uint32_t n,
                         cudaStream_t stream);
void launch_cast(const DeviceJob* jobs, const Task* tasks, uint32_t n, cudaStream_t stream);
void launch_scales(const ScaleJob* jobs, const Task* tasks, uint32_t n, cudaStream_t stream);

// Blocks of a persistent grid for `kernel` at `threads` per block: enough to fill every SM.
int persistent_blocks(const void* kernel, int threads);

}  // namespace fpg::cuda::fp8
