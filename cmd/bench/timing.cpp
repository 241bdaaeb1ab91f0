#include "cmd/bench/timing.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace fpg::bench {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

double median(std::vector<double> samples) {
  if (samples.empty()) return -1;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

Timing summarize(const std::vector<double>& samples) {
  if (samples.empty()) throw InternalError("bench: no measurement to summarize");
  Timing t;
  t.best = *std::min_element(samples.begin(), samples.end());
  t.median = median(samples);
  t.reps = static_cast<int>(samples.size());
  return t;
}

Timing time_it(const std::function<void()>& fn, int min_reps, double min_seconds) {
  fn();  // warm-up: page faults, caches, lazy pool start
  std::vector<double> samples;
  const double start = wall_seconds();
  while (static_cast<int>(samples.size()) < min_reps || wall_seconds() - start < min_seconds) {
    const double t0 = wall_seconds();
    fn();
    samples.push_back(wall_seconds() - t0);
    if (samples.size() >= 1000) break;
  }
  return summarize(samples);
}

}  // namespace fpg::bench
