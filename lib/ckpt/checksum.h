// Chunk checksums: XXH3-64 (xxHash, seed 0), ~7.5 GB/s per core (notes/checkpoint.md §4), of the
// stored bytes (checked without decompressing) and of the logical bytes (checked after decoding).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fpg::ckpt {

uint64_t checksum(const void* data, size_t size);

}  // namespace fpg::ckpt
