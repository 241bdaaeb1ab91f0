#include "ckpt/checkpoint_reshard.h"

#include "core/printable.h"
#include "core/error.h"
#include "pipeline/config.h"

namespace fpg::ckpt {

std::optional<uint64_t> parse_bucket_size(const std::string& s) {
  if (s == "none") return std::nullopt;
  if (!s.empty() && s.size() <= 19 && s.find_first_not_of("0123456789") == std::string::npos) {
    const uint64_t n = std::stoull(s);
    if (n > 0 && n <= pipeline::kMaxBucketSize) return n;
  }
  throw UsageError("bucket_size must be none or a number of elements from 1 to " +
                   std::to_string(pipeline::kMaxBucketSize) + ", not " + quoted_name(s));
}

}  // namespace fpg::ckpt
