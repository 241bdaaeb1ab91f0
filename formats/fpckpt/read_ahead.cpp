#include "formats/fpckpt/read_ahead.h"

#include <algorithm>
#include <memory>

#include "core/thread_start.h"

namespace fpg::fpckpt {

ReadAhead::ReadAhead(const CheckpointReader& reader, std::vector<ReadRange> ranges, uint64_t window)
    : reader_(reader), ranges_(std::move(ranges)), before_(ranges_.size() + 1), window_(window) {
  for (size_t i = 0; i < ranges_.size(); ++i) before_[i + 1] = before_[i] + ranges_[i].bytes;
  // Reading ahead only warms the page cache: refused a thread, the reads go on without it.
  if (!ranges_.empty()) thread_ = try_start_thread([this] { run(); }).value_or(std::thread());
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReadAhead::prefetch_datasets() const {
  const ckpt::Index& ix = reader_.index();
  std::vector<uint32_t> runs;  // in the order the ranges first need them
  std::vector<bool> seen(ix.runs.size());
  for (const ReadRange& r : ranges_) {
    if (r.key >= ix.keys.size()) continue;
    const auto [first, last] = reader_.chunks_in(r.key, r.lo, r.hi);
    for (const uint32_t* it = first; it != last; ++it) {
      const uint32_t run = ix.chunks[*it].run;
      if (run < seen.size() && !seen[run]) {
        seen[run] = true;
        runs.push_back(run);
      }
    }
  }
  reader_.prefetch_datasets(runs);
}

void ReadAhead::prefetch(size_t range) const {
  const ReadRange& r = ranges_[range];
  reader_.prefetch(r.key, r.lo, r.hi);
}

void ReadAhead::run() {
  // Hints only: a failure to locate or prefetch is left to the reads, which report it.
  try {
    prefetch_datasets();
    for (;;) {
      size_t take;
      {
        std::unique_lock<std::mutex> l(mu_);
        // The next range not asked for yet (those that were are being read: too late for them).
        cv_.wait(l, [&] {
          take = std::max(taken_, at_);
          return stop_ || (take < ranges_.size() && before_[take] - before_[at_] < window_);
        });
        if (stop_) return;
        taken_ = take + 1;
      }
      prefetch(take);
    }
  } catch (...) {
  }
}

void ReadAhead::next() {
  bool mine = false;
  size_t range = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (at_ >= ranges_.size()) return;
    range = at_++;
    if (taken_ <= range) {
      taken_ = range + 1;
      mine = true;
    }
  }
  cv_.notify_all();
  if (mine) prefetch(range);
}

std::unique_ptr<ckpt::ReadPlan> CheckpointReader::plan_reads(std::vector<ckpt::KeyRead> reads, uint64_t window) const {
  return std::make_unique<ReadAhead>(*this, std::move(reads), window);
}

}  // namespace fpg::fpckpt
