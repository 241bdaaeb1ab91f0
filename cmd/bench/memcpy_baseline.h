// The memcpy baseline that the quantize and optimizer figures of `fpgather bench` are divided by.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace fpg::bench {

// Copies `bytes` from src to dst, one contiguous slice per thread of `pool`. It uses the same pool
// as the measured code, so both pay the same dispatch cost.
void parallel_memcpy(ThreadPool& pool, void* dst, const void* src, size_t bytes);

}  // namespace fpg::bench
