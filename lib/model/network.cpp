#include "model/network.h"

#include <string>

namespace fpg::model {

bool operator==(const NetworkDims& a, const NetworkDims& b) {
  return a.input == b.input && a.hidden == b.hidden && a.ffn == b.ffn && a.layers == b.layers &&
         a.output == b.output;
}

std::vector<Param> network_params(const NetworkDims& d) {
  std::vector<Param> ps;
  ps.reserve(3 + 3 * d.layers);
  ps.push_back({"input.weight", {d.hidden, d.input}, DType::BF16, Role::embedding, false, false});
  for (uint64_t i = 0; i < d.layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    ps.push_back({b + "norm.weight", {d.hidden}, DType::BF16, Role::vector, false, false});
    ps.push_back({b + "fc1.weight", {2 * d.ffn, d.hidden}, DType::BF16, Role::matrix, false, true});
    ps.push_back({b + "fc2.weight", {d.hidden, d.ffn}, DType::BF16, Role::matrix, false, false});
  }
  ps.push_back({"final_norm.weight", {d.hidden}, DType::BF16, Role::vector, false, false});
  ps.push_back({"output.weight", {d.output, d.hidden}, DType::BF16, Role::output, false, false});
  return ps;
}

uint64_t network_numel(const NetworkDims& d) {
  const uint64_t block = d.hidden + 3 * d.ffn * d.hidden;
  return d.hidden * d.input + d.layers * block + d.hidden + d.output * d.hidden;
}

}  // namespace fpg::model
