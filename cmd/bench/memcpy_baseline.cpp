#include "cmd/bench/memcpy_baseline.h"

#include <algorithm>
#include <cstring>

namespace fpg::bench {

void parallel_memcpy(ThreadPool& pool, void* dst, const void* src, size_t bytes) {
  const size_t parts = pool.size();
  const size_t slice = (bytes + parts - 1) / parts;
  pool.parallel_for(parts, [&](size_t t) {
    const size_t lo = std::min(bytes, t * slice), hi = std::min(bytes, lo + slice);
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}

}  // namespace fpg::bench
