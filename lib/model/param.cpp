#include "model/param.h"

#include <array>

namespace fpg::model {
namespace {

constexpr std::array<std::string_view, 4> kRoleNames = {"matrix", "embedding", "output", "vector"};

}  // namespace

std::string_view role_name(Role r) { return kRoleNames[static_cast<size_t>(r)]; }

std::optional<Role> parse_role(std::string_view name) {
  for (size_t i = 0; i < kRoleNames.size(); ++i)
    if (kRoleNames[i] == name) return static_cast<Role>(i);
  return std::nullopt;
}

uint64_t Param::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

bool operator==(const Param& a, const Param& b) {
  return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype && a.role == b.role &&
         a.keep_in_fp32 == b.keep_in_fp32 && a.gated == b.gated;
}

}  // namespace fpg::model
