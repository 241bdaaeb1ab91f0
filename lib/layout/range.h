// A half-open interval [begin, end) of elements; the unit of every layout coordinate.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace fpg::layout {

struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
  bool contains(const Range& r) const { return r.begin >= begin && r.end <= end; }
  // The overlap with `r` (empty, begin == end, if none).
  Range intersect(const Range& r) const {
    const uint64_t b = std::max(begin, r.begin);
    return {b, std::max(b, std::min(end, r.end))};
  }
  Range shift_down(uint64_t by) const { return {begin - by, end - by}; }
  Range shift_up(uint64_t by) const { return {begin + by, end + by}; }
};

inline bool operator==(const Range& a, const Range& b) { return a.begin == b.begin && a.end == b.end; }
inline bool operator!=(const Range& a, const Range& b) { return !(a == b); }

// "[begin, end)"
inline std::string to_string(const Range& r) {
  return "[" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

}  // namespace fpg::layout
