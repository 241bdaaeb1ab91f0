#include "cmd/bench/peak_rss.h"

#include <malloc.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>

namespace fpg::bench {

Rss read_rss() {
  Rss r;
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long long kb = 0;
    while (std::fgets(line, sizeof line, f)) {
      if (std::sscanf(line, "VmRSS: %llu kB", &kb) == 1) r.current = kb * 1024;
      if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) r.peak = kb * 1024;
    }
    std::fclose(f);
  }
  if (r.peak == 0) {  // no procfs: the process's peak
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    r.peak = static_cast<uint64_t>(u.ru_maxrss) * 1024;
  }
  return r;
}

bool reset_peak_rss() {
  malloc_trim(0);
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace fpg::bench
