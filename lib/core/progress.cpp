#include "core/progress.h"

#include <cstdio>

namespace fpg {

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled) {}

Progress::~Progress() {
  if (!enabled_ || !drawn_) return;
  draw(done_.load());
  std::fputc('\n', stderr);
}

void Progress::advance(uint64_t amount) {
  const uint64_t done = done_.fetch_add(amount) + amount;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  draw(done);
}

void Progress::draw(uint64_t done) {
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth + 0.5);
  std::fprintf(stderr, "\r%s [%.*s%*s] %5.1f%%", label_.c_str(), filled,
               "##############################", kWidth - filled, "", frac * 100.0);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace fpg
