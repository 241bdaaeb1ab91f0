// The in-memory index of a checkpoint: keys, data files, stored runs and their chunks, declared
// padding, documents. It is what validation reads (validate.h checks it without touching data) and
// what formats/fpckpt writes as index.h5 (integer tables, names interned once: see man 5
// fpgather-format).
//
// Storage units: a rank stores each contiguous piece of a key it owns as one "run" (an HDF5 dataset
// in its data file) cut into fixed-size chunks. A chunk is the unit of checksums, compression and
// reading: chunk c of a run covers flat elements [offset, offset + length) of the run's key and is
// HDF5 chunk number (offset - run.lo) / run.chunk_elems of the run's dataset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/documents.h"
#include "ckpt/key.h"
#include "ckpt/version.h"

namespace fpg::ckpt {

// The most ranks a checkpoint holds (fpgather's or a DCP one): a rank number read from a file is
// checked against it before anything is sized by it.
constexpr uint32_t kMaxRanks = 1u << 20;

struct FileEntry {
  std::string name;   // relative to the checkpoint directory, e.g. "rank-00003.h5"
  uint32_t rank = 0;  // the writing rank
  uint64_t size = 0;  // bytes, recorded after the file was closed
};

// Per-run and per-chunk filter flags.
enum : uint32_t {
  kFilterZstd = 1u,     // run: the dataset's pipeline has zstd; chunk: zstd was applied
  kFilterShuffle = 2u,  // run: the pipeline has byte shuffle first; chunk: shuffle was applied
};

struct Run {
  uint32_t file = 0;         // index into Index::files
  uint32_t dataset = 0;      // the dataset "/<dataset>" in that file
  uint32_t key = 0;          // index into Index::keys
  uint32_t chunk_elems = 0;  // elements per chunk (the last chunk may hold fewer)
  uint64_t lo = 0;           // flat offset of the run's first element in the key
  uint64_t numel = 0;        // elements in the run
  DType dtype = DType::F32;  // element type the run was written with (must be the key's)
  uint32_t filters = 0;      // kFilter* of the dataset's filter pipeline

  uint64_t hi() const { return lo + numel; }
};

struct Chunk {
  uint32_t run = 0;           // index into Index::runs
  uint32_t key = 0;           // = runs[run].key (not stored on disk; filled by the reader)
  uint32_t file = 0;          // = runs[run].file (not stored on disk)
  uint32_t length = 0;        // logical elements
  uint64_t offset = 0;        // flat offset in the key
  uint32_t stored_bytes = 0;  // bytes as written to the file (after shuffle/compression)
  uint32_t flags = 0;         // kFilter* actually applied to this chunk
  uint64_t checksum_stored = 0;   // XXH3-64 of the stored bytes, seeded (Index::checksum_seed)
  uint64_t checksum_logical = 0;  // XXH3-64 of the `length` logical elements' bytes, seeded alike

  uint64_t hi() const { return offset + length; }
};

struct Padding {
  uint32_t key = 0;
  uint64_t lo = 0, hi = 0;  // [lo, hi), flat elements
};

// What the index's own checksum (format 2.0 on: tables and documents) said when it was read.
enum class IndexChecksum : uint8_t {
  verified,  // recorded and equal to what was read (also: an index built in memory)
  absent,    // the format version predates index checksums
  mismatch,  // recorded and different, or missing where the format version requires one
};

std::string_view index_checksum_name(IndexChecksum c);  // "verified", "absent", "mismatch"

struct Index {
  FormatVersion version = kFormatVersion;
  IndexChecksum index_checksum = IndexChecksum::verified;
  std::string index_checksum_detail;  // with `mismatch`: recorded and computed values, or what is missing
  std::string producer;  // "fpgather 0.1.0"
  Documents documents;
  std::vector<Key> keys;
  std::vector<FileEntry> files;
  std::vector<Run> runs;
  std::vector<Chunk> chunks;
  std::vector<Padding> padding;

  // Index of the key named `name`, or -1. Linear; callers that look up many build a map.
  long find_key(const std::string& name) const;
  // The name of the file that run `run` is stored in, or "" where the run or its file is not in the
  // tables (validation reports those): for messages and listings, safe on any index.
  std::string run_file_name(uint32_t run) const;
  // The seed of chunk c's checksums: chunk_seed(its key's name, its offset) where the version binds
  // chunk checksums (ckpt/checksum.h), else 0 (also for a chunk whose run or key does not exist).
  uint64_t checksum_seed(const Chunk& c) const;
  // Fills Chunk::key and Chunk::file from the runs (references out of range are left 0; validation
  // reports them).
  void link_chunks();
};

}  // namespace fpg::ckpt
