#include "formats/dcp/prefaulter.h"

#include <sys/mman.h>

#include <algorithm>

#include "core/thread_start.h"

namespace fpg::dcp {
namespace {

#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;
#endif
constexpr uintptr_t kPage = 4096;
constexpr size_t kStep = size_t{2} << 20;  // one huge page

}  // namespace

size_t Prefaulter::add(const void* data, size_t capacity) {
  Region& r = regions_.emplace_back();
  r.begin = reinterpret_cast<uintptr_t>(data);
  r.capacity = capacity;
  return regions_.size() - 1;
}

void Prefaulter::start() {
  // Prefaulting only moves page faults off the writer: refused a thread, the writer takes them.
  if (!regions_.empty()) thread_ = try_start_thread([this] { loop(); }).value_or(std::thread());
}

void Prefaulter::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = true;
  }
  cv_.notify_one();
}

void Prefaulter::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void Prefaulter::loop() {
  while (true) {
    bool progressed = false;
    for (Region& r : regions_) {
      const size_t used = r.used.load(std::memory_order_relaxed);
      size_t done = std::max(r.populated.load(std::memory_order_relaxed), used);
      const size_t target = std::min(r.capacity, used + ahead_);
      if (done >= target) continue;
      // Whole pages only: the page holding the used end may be shared with data being written.
      const uintptr_t lo = (r.begin + done + kPage - 1) & ~(kPage - 1);
      const uintptr_t hi = std::min((lo + kStep) & ~(kStep - 1), (r.begin + target) & ~(kPage - 1));
      if (hi > lo && madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE) != 0) return;
      r.populated.store(hi > lo ? hi - r.begin : target, std::memory_order_relaxed);
      progressed = true;
    }
    if (progressed) continue;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || pending_; });
    if (stop_) return;
    pending_ = false;
  }
}

}  // namespace fpg::dcp
