#include "formats/fpckpt/read_ahead.h"

#include <algorithm>

namespace fpg::fpckpt {

ReadAhead::ReadAhead(const CheckpointReader& reader, std::vector<ReadRange> ranges, uint64_t window)
    : reader_(reader), ranges_(std::move(ranges)), window_(window) {}

void ReadAhead::prefetch_datasets() {
  const ckpt::Index& ix = reader_.index();
  std::vector<uint32_t> runs;  // in the order the ranges first need them
  std::vector<bool> seen(ix.runs.size());
  for (const ReadRange& r : ranges_) {
    if (r.key >= ix.keys.size()) continue;
    const auto& list = reader_.chunks_of(r.key);
    auto it = std::partition_point(list.begin(), list.end(), [&](uint32_t c) { return ix.chunks[c].hi() <= r.lo; });
    for (; it != list.end() && ix.chunks[*it].offset < r.hi; ++it) {
      const uint32_t run = ix.chunks[*it].run;
      if (run < seen.size() && !seen[run]) {
        seen[run] = true;
        runs.push_back(run);
      }
    }
  }
  reader_.prefetch_datasets(runs);
}

void ReadAhead::next() {
  if (at_ >= ranges_.size()) return;
  if (at_ == 0) prefetch_datasets();
  // The range about to be read leaves the window (it is being read now). Not prefetched yet, it is
  // first: its reads then reach the disk before those of the ranges after it.
  if (at_ < issued_) {
    in_window_ -= ranges_[at_].bytes;
  } else {
    reader_.prefetch(ranges_[at_].key, ranges_[at_].lo, ranges_[at_].hi);
    issued_ = at_ + 1;
  }
  ++at_;
  while (issued_ < ranges_.size() && in_window_ < window_) {
    const ReadRange& r = ranges_[issued_++];
    reader_.prefetch(r.key, r.lo, r.hi);
    in_window_ += r.bytes;
  }
}

}  // namespace fpg::fpckpt
