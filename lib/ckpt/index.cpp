#include "ckpt/index.h"

namespace fpg::ckpt {

long Index::find_key(const std::string& name) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i].name == name) return static_cast<long>(i);
  return -1;
}

std::string Index::run_file_name(uint32_t run) const {
  if (run >= runs.size() || runs[run].file >= files.size()) return "";
  return files[runs[run].file].name;
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
