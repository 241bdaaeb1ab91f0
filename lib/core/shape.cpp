#include "core/shape.h"

#include <limits>

namespace fpg {

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

uint64_t shape_volume(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

bool checked_numel(const std::vector<uint64_t>& shape, uint64_t* numel) {
  uint64_t n = 1;
  bool zero = false;
  bool overflow = false;
  for (uint64_t d : shape) {
    if (d == 0) zero = true;
    if (!overflow && d != 0 && n > std::numeric_limits<uint64_t>::max() / d) overflow = true;
    if (!overflow) n *= d;
  }
  // A zero dimension makes the tensor empty, but a shape whose other dimensions overflow is still
  // nonsense and is refused, as safetensors' reference reader does (it multiplies left to right with checks).
  if (overflow) return false;
  *numel = zero ? 0 : n;
  return true;
}

}  // namespace fpg
