// `fpgather convert CKPT DST --compress C`: a checkpoint rewritten with other compression, key by key
// and run by run: the same keys, documents, ranks and declared padding, every value bitwise the same
// (`fpgather diff CKPT DST` is equal). Runs longer than piece_bytes are cut into runs of at most
// piece_bytes (on the source's chunk grid), so memory is one piece plus the writer's and reader's
// per-thread chunk buffers, whatever the checkpoint's size. DST is committed atomically
// (ckpt/state_store.h, StateSave::commit); an existing DST is refused, or with `force` replaced whole
// (app/convert/staged_output.h).
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/chunk_codec.h"
#include "core/thread_pool.h"

namespace fpg::app::convert {

struct RecompressOptions {
  ckpt::Compression compression;
  uint64_t chunk_bytes = 4ull << 20;   // chunk size of the output (train's default)
  uint64_t piece_bytes = 64ull << 20;  // largest read/write unit
  ThreadPool* pool = nullptr;
  bool progress = false;
  bool force = false;  // replace an existing DST
};

struct RecompressSummary {
  std::string source, target;
  uint64_t keys = 0, runs = 0;
  uint64_t logical_bytes = 0;
  uint64_t stored_bytes_in = 0, stored_bytes_out = 0;
};

RecompressSummary recompress_checkpoint(const std::string& src, const std::string& dst, const RecompressOptions& o);

}  // namespace fpg::app::convert
