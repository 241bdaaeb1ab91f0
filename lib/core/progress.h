// A progress bar on stderr for long operations; drawn only when enabled (a terminal, no
// --no-progress), throttled to a few redraws a second, and safe to advance from several threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace fpg {

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled);
  ~Progress();  // finishes the line if anything was drawn
  void advance(uint64_t amount);

 private:
  void draw(uint64_t done);

  std::string label_;
  uint64_t total_;
  bool enabled_;
  std::atomic<uint64_t> done_{0};
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace fpg
