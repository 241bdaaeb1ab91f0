// RankWriter's write path as a pipeline, so that compression keeps up with the disk whatever size
// the writer's calls have: the producer (RankWriter::write) copies each chunk into a slot and goes
// on as soon as the bytes are copied; the task queue's threads (core/task_queue.h) shuffle,
// compress and checksum slots in parallel; each slot is written with H5Dwrite_chunk strictly in
// submission order (a deterministic file layout) by whichever thread completes the chunk next in
// line, holding hdf5_mutex() (HDF5 is serial) while the other threads go on compressing.
//
// Slots come from one process-wide budget of (task queue threads + 2), shared by every pipeline
// alive (all ranks of a save in one process), so the memory of saving is bounded by threads x
// chunk size (a slot holds the chunk and its encoding: about 2 chunks, 3 with shuffle), not by
// the state's size; idle slots are freed when the last pipeline ends.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/chunk_codec.h"
#include "ckpt/index.h"
#include "core/task_queue.h"
#include "formats/fpckpt/hdf5_util.h"

namespace fpg::fpckpt {

class ChunkPipeline {
 public:
  // Chunks go to datasets of the HDF5 file at `path` (for messages); `vfd` is its POSIX descriptor
  // (-1: unknown) for starting writeback as we go.
  ChunkPipeline(std::string path, int vfd, const ckpt::Compression& c, TaskQueue& queue);
  // Waits for the chunks in flight (those not yet encoded are dropped) and closes the datasets.
  ~ChunkPipeline();
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;

  // Hands over dataset `id` (ids count up from 0, the run's dataset number), which will receive
  // `nchunks` chunks; it is closed once they are written. `what` names it in messages.
  void add_dataset(uint32_t id, Hid ds, uint64_t nchunks, std::string what);

  // Queues one chunk of dataset meta.run at dataset offset `at`: `meta` carries run, key, offset
  // and length (elements of `elem` bytes, from `src`); the chunk is `chunk_elems` long, zero-padded.
  // `shuffle`: the dataset's pipeline has byte shuffle. Blocks while the slot budget is used up.
  // Rethrows the first failure of an earlier chunk (FormatError naming file, key and range).
  void submit(const ckpt::Chunk& meta, uint64_t at, const void* src, uint64_t chunk_elems, size_t elem, bool shuffle);

  // Waits until every queued chunk is written; rethrows the first failure. Returns the chunks'
  // records (sizes, flags, checksums) in submission order.
  std::vector<ckpt::Chunk> drain();

  struct Slot;  // a chunk on its way (chunk_pipeline.cpp)

 private:
  void run(Slot* s);                  // a task: encode, then write what is next in line
  void encode(Slot& s);
  void write(Slot& s);                // holds hdf5_mutex()
  void fail(std::exception_ptr e);    // keeps the first

  const std::string path_;
  const int vfd_;
  const ckpt::Compression comp_;
  TaskQueue& queue_;

  std::mutex mu_;
  std::condition_variable idle_;
  uint64_t next_seq_ = 0, next_write_ = 0, in_flight_ = 0;
  bool writing_ = false, abandoned_ = false;
  std::map<uint64_t, Slot*> ready_;  // encoded, waiting for their turn
  std::exception_ptr error_;
  std::vector<ckpt::Chunk> written_;

  struct Dataset {
    Hid ds;
    uint64_t left = 0;
    std::string what;
  };
  std::vector<Dataset> datasets_;  // by id; touched only with hdf5_mutex() held
  uint64_t unsynced_ = 0;          // likewise
};

}  // namespace fpg::fpckpt
