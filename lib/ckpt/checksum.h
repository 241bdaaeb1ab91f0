// Checksums: XXH3-64 (xxHash), ~7.5 GB/s on one core, about twice zlib's crc32.
//
// Chunk checksums cover the stored bytes (checked without decompressing) and the logical bytes
// (checked after decoding). Since format 2.0 both are seeded with chunk_seed(key name, flat
// offset), so a chunk's checksum only matches where it was written: bytes that an index attributes
// to another key (swapped key names) or another offset (a moved chunk) fail `validate --data`.
// Format 1 checksums use seed 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace fpg::ckpt {

uint64_t checksum(const void* data, size_t size, uint64_t seed = 0);

// XXH3-64 (seed 0) of the key's name bytes followed by `offset` as 8 little-endian bytes.
uint64_t chunk_seed(std::string_view key, uint64_t offset);

// XXH3-64 (seed 0) over bytes given in pieces: the same value as checksum() of their concatenation.
class StreamChecksum {
 public:
  StreamChecksum();
  ~StreamChecksum();
  StreamChecksum(const StreamChecksum&) = delete;
  StreamChecksum& operator=(const StreamChecksum&) = delete;

  void update(const void* data, size_t size);
  // A little-endian u64 of `size`, then the bytes: a field whose end is unambiguous.
  void update_sized(const void* data, size_t size);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fpg::ckpt
