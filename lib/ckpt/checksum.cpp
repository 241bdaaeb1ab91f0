#include "ckpt/checksum.h"

// Header-only xxHash: no library to link, and the GPU machine only needs the header carried in.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fpg::ckpt {

uint64_t checksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace fpg::ckpt
