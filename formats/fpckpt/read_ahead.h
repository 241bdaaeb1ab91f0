// Read-ahead over a known sequence of checkpoint reads: a copy (reshard, export) knows every range
// it will read, in order, before it starts. Before each read the caller calls next(); a thread of
// the read-ahead's own hands the ranges that follow, up to `window` bytes past the one about to be
// read, to CheckpointReader::prefetch, so the disk is already reading them while the caller checks,
// converts and writes what it has. Without it a copy reads one piece (or slab) at a time and the
// disk idles between pieces. The prefetched bytes wait in the page cache, not in the process's
// memory. The thread first starts reading where the datasets the ranges read are described
// (CheckpointReader::prefetch_datasets), which locating their chunks needs first. A range about to
// be read that the thread has not reached yet is prefetched by next() itself, so that its reads
// reach the disk before those of the ranges after it; the caller never waits for the prefetching
// of ranges further ahead (locating their chunks, and posix_fadvise, which blocks while the disk's
// queue is full).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "formats/fpckpt/reader.h"

namespace fpg::fpckpt {

using ReadRange = ckpt::KeyRead;

class ReadAhead final : public ckpt::ReadPlan {
 public:
  ReadAhead(const CheckpointReader& reader, std::vector<ReadRange> ranges, uint64_t window);
  ~ReadAhead() override;  // waits for the prefetch in progress
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The caller is about to read the next range of the sequence: prefetches it unless that was
  // done, and lets the read-ahead go on to the ranges within the window after it (each range once).
  void next() override;

 private:
  void run();  // the thread
  void prefetch_datasets() const;
  void prefetch(size_t range) const;

  const CheckpointReader& reader_;
  std::vector<ReadRange> ranges_;
  std::vector<uint64_t> before_;  // bytes of the ranges before each one (ranges_.size() + 1 entries)
  uint64_t window_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t at_ = 0;     // ranges [0, at_) were asked for by next()
  size_t taken_ = 0;  // ranges [0, taken_) were prefetched, or are being, by one thread or the other
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fpg::fpckpt
