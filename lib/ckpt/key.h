// The checkpoint model (lib/ARCHITECTURE.md): what a checkpoint stores, independent of how the
// bytes lie on disk. A key is one stored tensor; its flat extent [0, numel) is covered by data chunks
// and declared padding intervals. formats/fpckpt maps this model onto HDF5 files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace fpg::ckpt {

// What a key holds; inspect groups sizes by it. Stored as a small integer (the enum's value).
enum class KeyKind : uint8_t { weight = 0, fp8_data = 1, fp8_scale = 2, master = 3, optimizer_state = 4, other = 5 };

std::string_view kind_name(KeyKind k);  // "weight", "fp8_data", ...
std::optional<KeyKind> parse_kind(std::string_view name);
constexpr int kKeyKindCount = 6;

struct Key {
  std::string name;
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;  // logical shape; {} is a scalar (numel 1)
  KeyKind kind = KeyKind::other;

  // Product of the shape; nullopt when it overflows 64 bits.
  std::optional<uint64_t> checked_numel() const;
  uint64_t numel() const { return checked_numel().value_or(0); }
};

// Key and file names: printable ASCII without control characters, 1..4096 bytes. File names must
// also be plain names (no '/', not "." or ".."), so an index can never point outside its directory.
bool valid_key_name(std::string_view name);
bool valid_file_name(std::string_view name);

}  // namespace fpg::ckpt
