#include "ckpt/checkpoint_reshard.h"

#include "core/error.h"

namespace fpg::ckpt {

std::optional<uint64_t> parse_bucket_size(const std::string& s) {
  if (s == "none") return std::nullopt;
  if (!s.empty() && s.size() <= 19 && s.find_first_not_of("0123456789") == std::string::npos) {
    const uint64_t n = std::stoull(s);
    if (n > 0) return n;
  }
  throw UsageError("bucket_size must be a positive number of elements or none, not '" + s + "'");
}

}  // namespace fpg::ckpt
