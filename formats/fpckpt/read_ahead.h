// Read-ahead over a known sequence of checkpoint reads: a copy (reshard, export) knows every range
// it will read, in order, before it starts. Before each read the caller calls next(); the ranges
// that follow, up to `window` bytes past the one about to be read, are handed to
// CheckpointReader::prefetch, so the disk is already reading them while the caller checks, converts
// and writes what it has. Without it a copy reads one piece (or slab) at a time and the disk idles
// between pieces. The prefetched bytes wait in the page cache, not in the process's memory. The
// first next() also starts reading where the datasets the ranges read are described
// (CheckpointReader::prefetch_datasets), which locating their chunks needs first. Each range's own
// reads are asked for before those of the ranges after it, so that the disk serves them first.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/fpckpt/reader.h"

namespace fpg::fpckpt {

struct ReadRange {
  uint32_t key = 0;
  uint64_t lo = 0, hi = 0;  // elements of the key
  uint64_t bytes = 0;       // (hi - lo) x element size
};

class ReadAhead {
 public:
  ReadAhead(const CheckpointReader& reader, std::vector<ReadRange> ranges, uint64_t window);

  // The caller is about to read the next range of the sequence: prefetches it, unless it was, and
  // what follows it within the window (each range once).
  void next();

 private:
  void prefetch_datasets();

  const CheckpointReader& reader_;
  std::vector<ReadRange> ranges_;
  uint64_t window_;
  size_t at_ = 0;          // the range about to be read
  size_t issued_ = 0;      // ranges [0, issued_) were prefetched
  uint64_t in_window_ = 0;  // bytes of ranges [at_, issued_)
};

}  // namespace fpg::fpckpt
