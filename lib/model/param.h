// One trainable parameter of a model spec: its name, shape, dtype and the roles that route it to
// buffers and optimizers (layout/buffer_key.h, optim/routing.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace fpg::model {

// What a parameter is to the optimizers. Muon takes only `matrix`; embedding and output weights are
// 2-D but always go to the scalar optimizer, as in Megatron.
enum class Role : uint8_t {
  matrix,     // a 2-D hidden weight (Muon-eligible)
  embedding,  // the input projection / embedding table
  output,     // the output head
  vector,     // norm weights, biases
};

std::string_view role_name(Role r);  // "matrix", "embedding", "output", "vector"
std::optional<Role> parse_role(std::string_view name);

struct Param {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype = DType::BF16;  // BF16 or F32
  Role role = Role::matrix;
  // A native fp32 parameter (Megatron's keep_in_fp32): dtype is F32 and it lives in its own fp32
  // buffer, never cast to bf16 or FP8.
  bool keep_in_fp32 = false;
  // SwiGLU fc1 of shape [2F, H]: rows [0, F) are the gate, rows [F, 2F) the up projection.
  bool gated = false;

  uint64_t numel() const;
  bool is_2d() const { return shape.size() == 2; }
  // Role matrix, 2-D and not kept in fp32: what the layer-wise layout hands to Muon by default.
  bool muon_eligible() const { return role == Role::matrix && is_2d() && !keep_in_fp32; }
};

bool operator==(const Param& a, const Param& b);
inline bool operator!=(const Param& a, const Param& b) { return !(a == b); }

}  // namespace fpg::model
