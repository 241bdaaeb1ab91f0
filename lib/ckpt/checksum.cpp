#include "ckpt/checksum.h"

#include <cstring>
#include <string>

// Header-only xxHash: no library to link, and the GPU machine only needs the header carried in.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fpg::ckpt {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "seeds and sized fields hash little-endian integers");

uint64_t checksum(const void* data, size_t size, uint64_t seed) {
  return XXH3_64bits_withSeed(data, size, seed);  // seed 0 is plain XXH3_64bits
}

uint64_t chunk_seed(std::string_view key, uint64_t offset) {
  std::string bytes(key);
  bytes.append(reinterpret_cast<const char*>(&offset), sizeof offset);
  return XXH3_64bits(bytes.data(), bytes.size());
}

struct StreamChecksum::State {
  XXH3_state_t xxh;
};

StreamChecksum::StreamChecksum() : state_(std::make_unique<State>()) { XXH3_64bits_reset(&state_->xxh); }
StreamChecksum::~StreamChecksum() = default;

void StreamChecksum::update(const void* data, size_t size) {
  if (size > 0) XXH3_64bits_update(&state_->xxh, data, size);
}

void StreamChecksum::update_sized(const void* data, size_t size) {
  const uint64_t n = size;
  update(&n, sizeof n);
  update(data, size);
}

uint64_t StreamChecksum::digest() const { return XXH3_64bits_digest(&state_->xxh); }

}  // namespace fpg::ckpt
