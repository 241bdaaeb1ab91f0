// Where a training run keeps its state: the seam between the use cases that save, load and rewrite a
// training checkpoint (app/checkpoint: `train --save/--load`; app/convert: its export, recompression
// and FP8 re-encoding; app/inspect: the run it records) and the format that stores it (fpgather's
// own, formats/fpckpt). A StateStore is handed to lib/ by state_store(), defined in
// formats/registry.cpp, so lib/ names no format.
//
// The unit of everything here is a key range of the checkpoint model (ckpt/index.h), written or read
// in pieces of megabytes: a call through these interfaces stands for a piece of work, never for an
// element.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/chunk_codec.h"
#include "ckpt/documents.h"
#include "ckpt/index.h"
#include "ckpt/rank_manifest.h"
#include "core/task_queue.h"
#include "core/thread_pool.h"

namespace fpg::ckpt {

struct StateWriteOptions {
  Compression compression;            // default zstd:1, no shuffle
  uint64_t chunk_bytes = 4ull << 20;  // target chunk size, at most kMaxChunkBytes; memory is about (threads + 2) x 2 chunks
  ThreadPool* pool = nullptr;         // for callers' own parallel work (the writer encodes on `tasks`)
  TaskQueue* tasks = nullptr;         // encoding threads; nullptr: TaskQueue::global()
};

// One rank's share of a checkpoint being saved: the keys it declares, the ranges it stores and the
// padding it declares; its bytes are encoded and written in the background.
class StateWriter {
 public:
  virtual ~StateWriter() = default;
  virtual uint32_t rank() const = 0;
  // Declares a key (idempotent by name) and returns its number for write/declare_padding.
  // UsageError if the name is invalid or declared before with another dtype, shape or kind.
  virtual uint32_t declare(const Key& key) = 0;
  // Stores elements [lo, lo + numel) of `key` from `data` (numel elements of the key's dtype),
  // copied before it returns. UsageError if the range leaves the key's extent; FormatError on a
  // write failure, here or from a later call.
  virtual void write(uint32_t key, uint64_t lo, const void* data, uint64_t numel) = 0;
  // As write(), without copying: `data` must stay alive and unchanged until fence() or finish()
  // returns or the writer is destroyed.
  virtual void write_borrowed(uint32_t key, uint64_t lo, const void* data, uint64_t numel) = 0;
  // A mark of what has been written so far; fence(mark) returns once no buffer given to
  // write_borrowed() before it is read any more.
  virtual uint64_t mark() const = 0;
  virtual void fence(uint64_t mark = UINT64_MAX) = 0;
  // Declares [lo, hi) of `key` as padding (never stored; reads as zeros).
  virtual void declare_padding(uint32_t key, uint64_t lo, uint64_t hi) = 0;
  // Waits for every piece, closes and syncs the rank's data; the writer cannot be used afterwards.
  // The manifest goes to the committing rank (StateSave::commit; as bytes across processes:
  // ckpt/manifest_blob.h).
  virtual RankManifest finish() = 0;
};

// A checkpoint being saved: its staging directory beside the target, held by the committing rank.
// Destroyed uncommitted, it removes the staging directory and everything written into it.
class StateSave {
 public:
  virtual ~StateSave() = default;
  // Where every rank writes (StateStore::writer, from any thread or process of the save).
  virtual const std::string& staging() const = 0;
  // Rank r's writer in this process, created on first use and finished by commit() (all such ranks
  // at once). Not thread-safe: ranks on threads of their own take StateStore::writer.
  virtual StateWriter& rank(uint32_t r) = 0;
  virtual Documents& documents() = 0;
  // Finishes the ranks of rank(), merges their manifests and `others` (the ranks written elsewhere)
  // with documents() into the index and commits the checkpoint atomically: a crash leaves either no
  // checkpoint or a complete one. Returns the committed index.
  virtual Index commit(std::vector<RankManifest> others = {}) = 0;
};

// A read of elements [lo, hi) of key `key` (`bytes` of it), one of a sequence planned in advance.
struct KeyRead {
  uint32_t key = 0;
  uint64_t lo = 0, hi = 0;
  uint64_t bytes = 0;
};

// Reading ahead along a planned sequence of reads: next() before each read of the sequence.
class ReadPlan {
 public:
  virtual ~ReadPlan() = default;
  virtual void next() = 0;
};

// A committed checkpoint opened for reading.
class StateReader {
 public:
  virtual ~StateReader() = default;
  // The checkpoint directory (after resolving `latest`).
  virtual const std::string& dir() const = 0;
  virtual const Index& index() const = 0;
  // Index of the key named `name`, or -1.
  virtual long find_key(const std::string& name) const = 0;
  // Elements [lo, hi) of `key` into `out` ((hi - lo) elements of the key's dtype), chunks read and
  // checked in `pool` (null: the global pool). FormatError naming file, key and range on a gap, a
  // checksum mismatch or a read failure.
  virtual void read(uint32_t key, uint64_t lo, uint64_t hi, void* out, ThreadPool* pool = nullptr) const = 0;
  // The reads that follow, in order: the disk reads up to `window` bytes ahead of the one in progress
  // (into the page cache) while the caller converts and writes. A hint: errors are left to read().
  virtual std::unique_ptr<ReadPlan> plan_reads(std::vector<KeyRead> reads, uint64_t window) const = 0;
  // What has been read from the data files so far: chunks and their stored bytes.
  virtual uint64_t chunks_read() const = 0;
  virtual uint64_t stored_bytes_read() const = 0;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // The file that makes a directory a committed checkpoint, and the one that makes a directory a root
  // of checkpoints naming its newest: for probes and messages.
  virtual std::string_view index_file() const = 0;
  virtual std::string_view latest_file() const = 0;
  // The checkpoint `latest` in `root` names; "" when there is none.
  virtual std::string latest(const std::string& root) const = 0;
  // Puts right what killed or failed saves left in the checkpoint root `root` (nothing if it is not a
  // directory); returns a line per action taken.
  virtual std::vector<std::string> recover(const std::string& root) const = 0;

  // Begins the save of a checkpoint at `target`: UsageError if it exists or its parent does not.
  virtual std::unique_ptr<StateSave> begin_save(const std::string& target, const StateWriteOptions& options) const = 0;
  // Rank `rank`'s writer into the staging directory of a save (StateSave::staging).
  virtual std::unique_ptr<StateWriter> writer(const std::string& staging, uint32_t rank,
                                              const StateWriteOptions& options) const = 0;
  // After the save of checkpoint `name` into the root `root`: `latest` names it, and only the `keep`
  // newest checkpoints stay (0: all; the one `latest` names always). Returns the names removed.
  virtual std::vector<std::string> publish(const std::string& root, const std::string& name, size_t keep) const = 0;

  // Opens the checkpoint at `path` (a checkpoint, or a root holding `latest`) for a command that uses
  // it (`refusing` says what: "resume from it"): refused with the problems (exit 1) when it fails
  // validation's index checks. With `validate` false (salvage) nothing is checked and an altered
  // index is opened as it is, with a warning. FormatError if there is no readable index.
  virtual std::unique_ptr<StateReader> open(const std::string& path, const std::string& refusing,
                                            bool validate = true) const = 0;
  // The same without checks or warnings, for reports of what a checkpoint holds.
  virtual std::unique_ptr<StateReader> open_as_is(const std::string& path) const = 0;
};

// The store of training checkpoints this build writes (defined in formats/registry.cpp).
const StateStore& state_store();

}  // namespace fpg::ckpt
