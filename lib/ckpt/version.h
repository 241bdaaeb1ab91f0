// The on-disk format version: major.minor. A reader reads every version with its major number up to
// kFormatVersion.major (older minors and majors it shipped: golden files in testdata/ckpt guard
// them), and refuses a newer major with a message that says so. A minor bump only adds tables,
// attributes or documents that older readers may ignore.
#pragma once

#include <cstdint>
#include <string>

namespace fpg::ckpt {

struct FormatVersion {
  uint32_t major = 1;
  uint32_t minor = 0;
};

inline constexpr FormatVersion kFormatVersion{1, 0};
// The oldest major this reader still reads.
inline constexpr uint32_t kOldestReadableMajor = 1;

inline std::string to_string(const FormatVersion& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}
inline bool readable(const FormatVersion& v) {
  return v.major >= kOldestReadableMajor && v.major <= kFormatVersion.major;
}

}  // namespace fpg::ckpt
