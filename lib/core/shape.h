// Tensor shapes as messages and listings print them: "[2, 3]", "[]" for a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg {

std::string shape_string(const std::vector<uint64_t>& shape);

}  // namespace fpg
