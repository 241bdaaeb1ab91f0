#include "formats/fpckpt/read_ahead.h"

namespace fpg::fpckpt {

ReadAhead::ReadAhead(const CheckpointReader& reader, std::vector<ReadRange> ranges, uint64_t window)
    : reader_(reader), ranges_(std::move(ranges)), window_(window) {}

void ReadAhead::next() {
  if (at_ >= ranges_.size()) return;
  // The range about to be read leaves the window (it is being read now, prefetched or not).
  if (at_ < issued_) in_window_ -= ranges_[at_].bytes;
  else issued_ = at_ + 1;
  ++at_;
  while (issued_ < ranges_.size() && in_window_ < window_) {
    const ReadRange& r = ranges_[issued_++];
    reader_.prefetch(r.key, r.lo, r.hi);
    in_window_ += r.bytes;
  }
}

}  // namespace fpg::fpckpt
