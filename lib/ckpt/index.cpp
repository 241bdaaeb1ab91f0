#include "ckpt/index.h"

#include "ckpt/checksum.h"

namespace fpg::ckpt {

std::string_view index_checksum_name(IndexChecksum c) {
  switch (c) {
    case IndexChecksum::verified: return "verified";
    case IndexChecksum::absent: return "absent";
    case IndexChecksum::mismatch: return "mismatch";
  }
  return "unknown";
}

long Index::find_key(const std::string& name) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i].name == name) return static_cast<long>(i);
  return -1;
}

std::string Index::run_file_name(uint32_t run) const {
  if (run >= runs.size() || runs[run].file >= files.size()) return "";
  return files[runs[run].file].name;
}

uint64_t Index::checksum_seed(const Chunk& c) const {
  if (!binds_chunk_checksums(version) || c.run >= runs.size() || runs[c.run].key >= keys.size()) return 0;
  return chunk_seed(keys[runs[c.run].key].name, c.offset);
}

void Index::link_chunks() {
  for (auto& c : chunks) {
    if (c.run < runs.size()) {
      c.key = runs[c.run].key;
      c.file = runs[c.run].file;
    } else {
      c.key = c.file = 0;
    }
  }
}

}  // namespace fpg::ckpt
