// One rank's data file: the rank stores each contiguous piece of a key it owns as a run (an HDF5
// dataset "/<n>", 1-D, chunked), cut into chunks that are shuffled/compressed and checksummed by
// the task queue's threads while write() goes on (from a copy, or in place for write_borrowed()),
// and written (chunk_pipeline.h): uncompressed chunks into space allocated with their dataset, by
// those threads in parallel; compressed ones with H5Dwrite_chunk in order. Padding is declared,
// never written; a rank that owns only padding creates no file. finish() waits for the chunks,
// closes and fsyncs the file and returns the manifest that the committing rank merges into the
// index (commit.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/chunk_codec.h"
#include "ckpt/index.h"
#include "ckpt/state_store.h"

namespace fpg::fpckpt {

using WriteOptions = ckpt::StateWriteOptions;
using RankManifest = ckpt::RankManifest;

// "rank-00003.h5"
std::string rank_file_name(uint32_t rank);

// fpgather's ckpt::StateWriter: final, so that the writers of this folder and the benchmarks call it
// without virtual dispatch.
class RankWriter final : public ckpt::StateWriter {
 public:
  RankWriter(std::string dir, uint32_t rank, WriteOptions opts = {});
  ~RankWriter();
  RankWriter(const RankWriter&) = delete;
  RankWriter& operator=(const RankWriter&) = delete;

  // Declares a key (idempotent by name) and returns its number for write/declare_padding.
  // UsageError if the name is invalid or declared before with another dtype, shape or kind, or the
  // dtype has sub-byte elements.
  uint32_t declare(const ckpt::Key& key) override;

  // Stores elements [lo, lo + numel) of `key` from `data` (numel elements of the key's dtype).
  // Returns once the bytes are copied (data may then change); they are encoded and written in the
  // background. UsageError if the range leaves the key's extent; FormatError on a write failure,
  // here or from a later write() or finish().
  void write(uint32_t key, uint64_t lo, const void* data, uint64_t numel) override;

  // As write(), without copying: the encoding threads read `data` in place, so it must stay alive
  // and unchanged until fence() or finish() returns or the writer is destroyed (callers whose
  // source outlives the save: the training state, the bench's state). The file is the same as
  // write() makes.
  void write_borrowed(uint32_t key, uint64_t lo, const void* data, uint64_t numel) override;

  // A mark of what has been written so far, for fence().
  uint64_t mark() const override;

  // Returns once no chunk written before `mark` (default: so far) reads a buffer given to
  // write_borrowed() any more: the caller may reuse or free them. Write failures are reported by
  // the next write() or finish().
  void fence(uint64_t mark = UINT64_MAX) override;

  // Declares [lo, hi) of `key` as padding (never stored; reads as zeros).
  void declare_padding(uint32_t key, uint64_t lo, uint64_t hi) override;

  // Waits for every chunk, closes and fsyncs the data file; the writer cannot be used afterwards.
  RankManifest finish() override;

  uint32_t rank() const override { return manifest_.rank; }

 private:
  void open_file();
  void write_run(uint32_t key, uint64_t lo, const void* data, uint64_t numel, bool borrowed);

  std::string dir_;
  WriteOptions opts_;
  RankManifest manifest_;
  std::unordered_map<std::string, uint32_t> key_of_;
  struct H5;  // HDF5 handles and the chunk pipeline, kept out of this header
  std::unique_ptr<H5> h5_;
  bool finished_ = false;
};

}  // namespace fpg::fpckpt
