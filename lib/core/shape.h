// Tensor shapes as messages and listings print them: "[2, 3]", "[]" for a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg {

std::string shape_string(const std::vector<uint64_t>& shape);

// The number of elements of a shape (1 for a scalar); the caller keeps it from overflowing.
uint64_t shape_volume(const std::vector<uint64_t>& shape);

}  // namespace fpg
