#include "ckpt/key.h"

namespace fpg::ckpt {

namespace {
constexpr std::string_view kKindNames[kKeyKindCount] = {"weight", "fp8_data", "fp8_scale",
                                                        "master", "optimizer_state", "other"};
}

std::string_view kind_name(KeyKind k) {
  const auto i = static_cast<size_t>(k);
  return i < kKeyKindCount ? kKindNames[i] : std::string_view("unknown");
}

std::optional<KeyKind> parse_kind(std::string_view name) {
  for (int i = 0; i < kKeyKindCount; ++i)
    if (kKindNames[i] == name) return static_cast<KeyKind>(i);
  return std::nullopt;
}

std::optional<uint64_t> Key::checked_numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d != 0 && n > UINT64_MAX / d) return std::nullopt;
    n *= d;
  }
  return n;
}

bool valid_key_name(std::string_view name) {
  if (name.empty() || name.size() > 4096) return false;
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  return true;
}

bool valid_file_name(std::string_view name) {
  if (!valid_key_name(name) || name == "." || name == "..") return false;
  return name.find('/') == std::string_view::npos && name.find('\\') == std::string_view::npos;
}

}  // namespace fpg::ckpt
