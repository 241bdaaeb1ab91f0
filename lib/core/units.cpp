#include "core/units.h"

#include <cstdio>

namespace fpg {

std::string plural(uint64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many.empty() ? one + "s" : many);
}

std::string byte_size(uint64_t bytes) {
  if (bytes < 1000) return std::to_string(bytes) + " B";
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes < 1000 * 1000) std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else if (bytes < 1000ull * 1000 * 1000) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  return buf;
}

}  // namespace fpg
