// The on-disk format version: major.minor. A reader reads every version with its major number up to
// kFormatVersion.major (older minors and majors it shipped: golden files in testdata/ckpt guard
// them), and refuses a newer major with a message that says so. A minor bump only adds tables,
// attributes or documents that older readers may ignore; a change that older readers would
// misread (such as what a checksum covers) bumps the major.
//
// 1.0: the first format. 2.0: the index carries a checksum of its tables and documents, and chunk
// checksums are seeded with the chunk's key and offset (ckpt/checksum.h).
#pragma once

#include <cstdint>
#include <string>

namespace fpg::ckpt {

struct FormatVersion {
  uint32_t major = 1;
  uint32_t minor = 0;
};

inline constexpr FormatVersion kFormatVersion{2, 0};
// The oldest major this reader still reads.
inline constexpr uint32_t kOldestReadableMajor = 1;

inline std::string to_string(const FormatVersion& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}
inline bool readable(const FormatVersion& v) {
  return v.major >= kOldestReadableMajor && v.major <= kFormatVersion.major;
}
// Whether an index of this version records its own checksum (attribute `index_checksum`).
inline bool has_index_checksum(const FormatVersion& v) { return v.major >= 2; }
// Whether its chunk checksums are seeded with chunk_seed(key, offset) (else seed 0).
inline bool binds_chunk_checksums(const FormatVersion& v) { return v.major >= 2; }

}  // namespace fpg::ckpt
