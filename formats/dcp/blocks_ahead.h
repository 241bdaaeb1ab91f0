// The bytes of a sequence of items produced ahead of a DCP rank writer by a thread of their own, and
// lent to it block by block (BorrowBytes) with each block's CRC-32: reading the source, checksumming
// and writing the file overlap instead of taking turns, in memory `depth` blocks. The blocks are the
// writer's: [k·B, min((k+1)·B, size)) of each item for its block size B, which is how a torch.save
// record asks for them (zip_writer.h). Where the system refuses the thread (core/thread_start.h), the
// writer's own thread fills each block as it asks for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/byte_buffer.h"
#include "formats/dcp/byte_sink.h"

namespace fpg::dcp {

class BlocksAhead {
 public:
  // Starts producing `items` (each its size in bytes and its fill) in order, `depth` blocks ahead.
  BlocksAhead(std::vector<std::pair<uint64_t, FillBytes>> items, size_t block_bytes, size_t depth = 4);
  ~BlocksAhead();  // stops the producer and waits for it
  BlocksAhead(const BlocksAhead&) = delete;
  BlocksAhead& operator=(const BlocksAhead&) = delete;

  // The lender of item `i`'s bytes: items must be borrowed in order, each to its end. An error of the
  // item's fill is thrown here, where its bytes are asked for.
  BorrowBytes item(size_t i);

 private:
  struct Block {
    size_t item = 0;
    uint64_t offset = 0;
    // Filled whole before it is lent: never zero-filled, and a buffer sized down for an item's last
    // block keeps its memory for the next item's first.
    ByteBuffer data;
    uint32_t crc = 0;
  };
  void produce();
  // Without the producer thread: the block filled here, for the writer that asks for it.
  BorrowedBlock fill_now(size_t i, uint64_t offset, size_t size);

  std::vector<std::pair<uint64_t, FillBytes>> items_;
  size_t block_, depth_;
  std::mutex m_;
  std::condition_variable ready_, room_;
  std::deque<Block> queue_;
  std::vector<ByteBuffer> free_;
  Block lent_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread producer_;
};

}  // namespace fpg::dcp
