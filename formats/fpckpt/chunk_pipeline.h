// RankWriter's write path as a pipeline, so that compression keeps up with the disk whatever size
// the writer's calls have: the producer (RankWriter::write) copies each chunk into a slot and goes
// on as soon as the bytes are copied; the task queue's threads (core/task_queue.h) shuffle,
// compress and checksum slots in parallel. Where a file's chunks have sizes known in advance
// (no compression: every chunk is stored whole), their datasets are created with their chunks
// allocated up front, and each encoding thread pwrite()s its chunk at its address as soon as it is
// checksummed, in any order, outside the HDF5 mutex (the addresses are fixed when the dataset is
// created, so the file's layout is still deterministic; one write into a file at a time, as the
// kernel copies buffered writes into one file anyway). Compressed chunks, whose sizes are known
// only once encoded, go to one process-wide writer thread that writes the encoded slots of every
// pipeline with H5Dwrite_chunk, each pipeline's strictly in submission order (a deterministic file
// layout), holding hdf5_mutex() (HDF5 is serial). The encoding threads hand a slot to the writer
// when it is next in line and never wait for HDF5 or the disk, so none of them stops compressing
// to write, and several pipelines (ranks) do not queue their threads on the mutex.
//
// Slots come from one process-wide budget of (task queue threads + 2), shared by every pipeline
// alive (all ranks of a save in one process), so the memory of saving is bounded by threads x
// chunk size (a slot holds the chunk and its encoding: about 2 chunks, 3 with shuffle; a borrowed
// chunk only its encoding), not by the state's size; idle slots are freed, and the writer thread ends, when the last pipeline ends.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ckpt/chunk_codec.h"
#include "ckpt/index.h"
#include "core/task_queue.h"
#include "formats/fpckpt/hdf5_util.h"

namespace fpg::fpckpt {

// Where saving time goes, summed over every pipeline of the process so far (`bench io` prints the
// difference over one save): the producers copying chunks into slots and waiting for a free slot,
// (borrowed chunks are not copied),
// the encoding threads' busy time (thread-seconds), the time in writing chunks and writeback (the
// writer thread's, plus the encoding threads' own writes of preallocated chunks). A writer thread
// busy for most of the save is the serial bound; producers mostly waiting with the writer idle mean
// encoding is.
struct PipelineTimes {
  double copy_s = 0, wait_s = 0, encode_s = 0, write_s = 0;
};
PipelineTimes pipeline_times();

class ChunkPipeline {
 public:
  // Chunks go to datasets of the HDF5 file at `path` (for messages); `vfd` is its POSIX descriptor
  // (-1: unknown) for starting writeback as we go.
  ChunkPipeline(std::string path, int vfd, const ckpt::Compression& c, TaskQueue& queue);
  // Waits for the chunks in flight (those not yet encoded are dropped) and closes the datasets.
  ~ChunkPipeline();
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;

  // Whether datasets of this pipeline are created with their chunks allocated up front
  // (H5D_ALLOC_TIME_EARLY) and written by add_dataset()'s addresses: no compression, a known file
  // descriptor, and an HDF5 that reports chunk addresses.
  bool preallocates() const;

  // Hands over dataset `id` (ids count up from 0, the run's dataset number), which will receive
  // `nchunks` chunks of `chunk_elems` elements; it is closed once they are written. `what` names it
  // in messages. With preallocates(), its chunks' addresses are looked up here (a chunk HDF5 did not
  // allocate is written through HDF5 instead).
  void add_dataset(uint32_t id, Hid ds, uint64_t nchunks, uint64_t chunk_elems, std::string what);

  // Queues one chunk of dataset meta.run at dataset offset `at`: `meta` carries run, key, offset
  // and length (elements of `elem` bytes, from `src`); the chunk is `chunk_elems` long, zero-padded.
  // Its checksums are seeded with `seed` (ckpt::chunk_seed of its key's name and offset).
  // `shuffle`: the dataset's pipeline has byte shuffle. Blocks while the slot budget is used up.
  // Rethrows the first failure of an earlier chunk (FormatError naming file, key and range).
  // `borrowed`: the bytes are not copied; the encoding threads (and, for a chunk stored raw and
  // whole, the writer thread) read them from `src`, which must stay alive and unchanged until
  // fence() or drain() returns or the pipeline is destroyed. The stored bytes, checksums and file
  // layout are the same either way.
  void submit(const ckpt::Chunk& meta, uint64_t seed, uint64_t at, const void* src, uint64_t chunk_elems, size_t elem,
              bool shuffle, bool borrowed = false);

  // A mark of the chunks submitted so far, for fence().
  uint64_t mark() const;

  // Waits until no chunk submitted before `mark` (default: so far) still reads a borrowed buffer
  // (it has been encoded into its slot, or written); the caller may then reuse or free those
  // buffers. Failures are left to the next submit() or drain().
  void fence(uint64_t mark = UINT64_MAX);

  // Waits until every queued chunk is written; rethrows the first failure. Returns the chunks'
  // records (sizes, flags, checksums) in submission order.
  std::vector<ckpt::Chunk> drain();

  struct Slot;  // a chunk on its way (chunk_pipeline.cpp)

 private:
  void run(Slot* s);                  // a task: encode, then hand what is next in line to the writer
  void encode(Slot& s);
  void store(Slot* s);                // write (unless failed), then free the slot
  void write(Slot& s);                // on the writer thread, holds hdf5_mutex()
  void write_direct(Slot& s);         // at the chunk's preallocated address, on any thread
  void fail(std::exception_ptr e);    // keeps the first
  void unborrow(Slot& s);             // the slot no longer reads the caller's buffer

  const std::string path_;
  const int vfd_;
  const ckpt::Compression comp_;
  TaskQueue& queue_;

  mutable std::mutex mu_;
  std::condition_variable idle_;
  uint64_t next_seq_ = 0, in_flight_ = 0;
  uint64_t next_turn_ = 0, next_handoff_ = 0;  // the writer thread's order (chunks it writes only)
  std::set<uint64_t> borrowing_;  // seqs of chunks in flight that still read a caller's buffer
  bool abandoned_ = false;
  std::map<uint64_t, Slot*> ready_;  // encoded, waiting for their turn to go to the writer
  std::exception_ptr error_;
  std::vector<std::pair<uint64_t, ckpt::Chunk>> written_;  // by seq, in the order written
  // Per dataset id, where its preallocated chunks lie (empty: written through HDF5), and its name.
  struct Placement {
    std::vector<uint64_t> addr;
    std::string what;
  };
  std::vector<Placement> placement_;
  std::atomic<uint64_t> unsynced_direct_{0};  // bytes written directly since writeback was last started
  std::mutex direct_mu_;                       // held by a direct write

  struct Dataset {
    Hid ds;
    uint64_t left = 0;
    std::string what;
  };
  std::vector<Dataset> datasets_;  // by id; touched only with hdf5_mutex() held
  uint64_t unsynced_ = 0;          // likewise
};

}  // namespace fpg::fpckpt
