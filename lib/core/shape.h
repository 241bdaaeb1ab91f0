// Tensor shapes as messages and listings print them: "[2, 3]", "[]" for a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg {

std::string shape_string(const std::vector<uint64_t>& shape);

// The number of elements of a shape (1 for a scalar); the caller keeps it from overflowing.
uint64_t shape_volume(const std::vector<uint64_t>& shape);

// The number of elements of a shape read from a file or given by a caller, or false when it overflows
// 64 bits. A zero dimension makes it 0, but a shape whose other dimensions overflow is still refused.
bool checked_numel(const std::vector<uint64_t>& shape, uint64_t* numel);

}  // namespace fpg
