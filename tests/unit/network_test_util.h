// Shared by the network unit tests: the fp64 reference's inputs from the fp32 arrays.
#pragma once

#include <vector>

namespace fpg::test {

inline std::vector<std::vector<double>> to_double(const std::vector<std::vector<float>>& a) {
  std::vector<std::vector<double>> d;
  for (const auto& v : a) d.emplace_back(v.begin(), v.end());
  return d;
}

inline std::vector<const double*> const_ptrs(const std::vector<std::vector<double>>& a) {
  std::vector<const double*> p;
  for (const auto& v : a) p.push_back(v.data());
  return p;
}

}  // namespace fpg::test
