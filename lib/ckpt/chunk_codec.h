// Encoding of one chunk for storage, done in fpgather's own threads (the HDF5 filter pipeline is
// serial) and written with H5Dwrite_chunk: the chunk is padded to the run's full chunk size with
// zeros (HDF5 stores edge chunks whole), optionally byte-shuffled exactly as HDF5's shuffle filter
// (id 2) does, then compressed as one Zstandard frame with its content size, as the registered HDF5
// zstd filter (id 32015) expects. A chunk that would shrink by less than 5% is stored raw and its
// HDF5 filter mask says so, so plugin-equipped readers still decode every chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fpg::ckpt {

// The largest chunk a checkpoint writer is asked for: it holds (threads + 2) x 2 chunks in memory at once.
constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 30;

struct Compression {
  bool zstd = true;
  int level = 1;         // zstd level, 1..22 (negative levels are zstd's fast modes: -7..-1)
  bool shuffle = false;  // byte shuffle before zstd
};

// "none", "zstd", "zstd:LEVEL", optionally followed by "+shuffle" ("zstd:3+shuffle"). UsageError
// otherwise, naming the option by `field`. to_string gives the same form back.
Compression parse_compression(std::string_view text, const std::string& field = "compress");
std::string to_string(const Compression& c);

// HDF5's shuffle (filter 2) and its inverse over `size` bytes of `elem`-byte elements.
void shuffle_bytes(const uint8_t* in, uint8_t* out, size_t size, size_t elem);
void unshuffle_bytes(const uint8_t* in, uint8_t* out, size_t size, size_t elem);

struct EncodedChunk {
  const uint8_t* data = nullptr;  // into the logical input or the scratch buffers
  size_t size = 0;
  uint32_t flags = 0;  // kFilterZstd | kFilterShuffle as applied (index.h)
};

// Per-thread buffers, reused between chunks so memory stays at a few chunks per thread.
struct CodecScratch {
  std::vector<uint8_t> a, b, c;
};

// Encodes `length` elements of `elem` bytes (length <= chunk_elems) as a chunk of chunk_elems.
EncodedChunk encode_chunk(const void* logical, uint64_t length, uint64_t chunk_elems, size_t elem,
                          const Compression& c, CodecScratch& scratch);

// Decodes stored bytes with `flags` into `out` (length * elem bytes). Returns "" or what is wrong
// (a corrupt frame, a wrong decoded size) for the caller to report with file, key and range.
std::string decode_chunk(const uint8_t* stored, size_t stored_size, uint32_t flags, uint64_t length,
                         uint64_t chunk_elems, size_t elem, void* out, CodecScratch& scratch);

}  // namespace fpg::ckpt
