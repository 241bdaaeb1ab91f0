// `fpgather bench dcp-make`: a synthetic PyTorch DCP checkpoint of any number of chunks, written by
// dcp::DcpWriter as torch's FileSystemWriter lays one out (TORCH_SAVE items, one data file per rank),
// for the DCP benchmarks (BENCHMARKS.md).
//
// `chunks` chunks spread over `keys` fp32 tensor keys (key k gets chunks / keys, the first
// chunks % keys one more), each key row-sharded into chunks of `chunk_bytes`: even keys are 2-D
// "model.layers.K.weight" [chunks_k * rows, cols] (cols the largest power of two up to 1024 that
// divides the chunk's elements), odd keys 1-D "model.layers.K.bias" [chunks_k * elements]. Chunk j of
// a key goes to rank j * ranks / chunks_k, so each rank holds one contiguous block of every key, as
// data-parallel sharding leaves it. Element i (row-major) of key k holds synthetic_value(k, i), so an
// export can be checked value by value.
#pragma once

#include <cstdint>
#include <string>

namespace fpg::bench {

struct SyntheticDcpOptions {
  std::string dir;  // the checkpoint to create (must not exist)
  uint64_t chunks = 1'000'000;
  uint32_t keys = 1000;
  uint32_t ranks = 8;
  uint64_t chunk_bytes = 16;  // a positive multiple of 4: fp32 elements
};

struct SyntheticDcpSummary {
  uint64_t chunks = 0, keys = 0, ranks = 0;
  uint64_t tensor_bytes = 0;    // the tensors' elements
  uint64_t file_bytes = 0;      // the data files and .metadata on disk
  uint64_t metadata_bytes = 0;  // .metadata
  double seconds = 0;
};

// The fqn of key k ("model.layers.7.bias").
std::string synthetic_key(uint32_t k);

// The value of flat element i of key k: (i + 7919 k) mod 2^24, exact in fp32.
inline float synthetic_value(uint32_t key, uint64_t element) {
  return static_cast<float>((element + 7919ull * key) % (1ull << 24));
}

// The bytes of a DCP directory's regular files, and of its .metadata among them.
struct DcpFileSizes {
  uint64_t files = 0, metadata = 0;
};
DcpFileSizes dcp_file_sizes(const std::string& dir);

// Writes and commits the checkpoint, ranks in parallel on the global thread pool. fpg::UsageError
// for options that describe no checkpoint (no chunks, fewer chunks than keys, a chunk size that is
// not whole fp32 elements, an existing `dir`).
SyntheticDcpSummary make_synthetic_dcp(const SyntheticDcpOptions& o);

}  // namespace fpg::bench
