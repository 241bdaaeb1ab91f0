// Faults in fresh memory on a helper thread just ahead of the thread that fills it.
//
// The kernel zeroes every page on its first write; decoding a large pickle spends a third of its time
// there (page faults on the node, pool and memo arrays as they grow into their reserved capacity). A
// Prefaulter keeps up to `ahead` bytes past each region's used size populated (MADV_POPULATE_WRITE,
// which maps zeroed pages without writing to them), so the filling thread writes to memory that is
// already there. The filler reports its progress with used(); nothing is populated past a region's
// capacity, so the memory held stays within `ahead` of what is used. Where the kernel lacks
// MADV_POPULATE_WRITE (before Linux 5.14) the helper stops and the filler faults as before.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <deque>

namespace fpg::dcp {

class Prefaulter {
 public:
  explicit Prefaulter(size_t ahead = size_t{32} << 20) : ahead_(ahead) {}
  ~Prefaulter() { stop(); }
  Prefaulter(const Prefaulter&) = delete;
  Prefaulter& operator=(const Prefaulter&) = delete;

  // Adds a region [data, data + capacity) of which the first bytes are in use; returns its id for
  // used(). Call before start().
  size_t add(const void* data, size_t capacity);
  void start();
  // The region's used size in bytes grew to `bytes` (cheap: a relaxed store and, now and then, a wake).
  void used(size_t region, size_t bytes) {
    Region& r = regions_[region];
    r.used.store(bytes, std::memory_order_relaxed);
    if (bytes + ahead_ / 2 > r.populated.load(std::memory_order_relaxed)) wake();
  }
  void stop();

 private:
  struct Region {
    uintptr_t begin = 0;
    size_t capacity = 0;
    std::atomic<size_t> used{0}, populated{0};
  };
  void wake();
  void loop();

  size_t ahead_;
  std::deque<Region> regions_;  // stable addresses: Region holds atomics
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, pending_ = false;
  std::thread thread_;
};

}  // namespace fpg::dcp
