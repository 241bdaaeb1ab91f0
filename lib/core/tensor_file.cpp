#include "core/tensor_file.h"

#include <set>

namespace fpg {

std::vector<std::string> ShardIndex::shard_files() const {
  std::set<std::string> files;
  for (const auto& [tensor, file] : weight_map) files.insert(file);
  return {files.begin(), files.end()};
}

}  // namespace fpg
