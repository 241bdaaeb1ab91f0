#include "formats/dcp/safetensors_item.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/shape.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors/strict_json.h"

namespace fpg::dcp {

constexpr const char* kShardingInfoKey = "DCP_SHARDING_INFO";

bool looks_like_safetensors(const uint8_t* head, size_t n) {
  if (n < 9 || head[8] != '{') return false;
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | head[i];
  return len >= 2 && len <= safetensors::kMaxHeaderSize;
}

SafetensorsImage::SafetensorsImage(std::shared_ptr<const DataFile> file, uint64_t offset)
    : file_(std::move(file)) {
  name_ = file_->path() + " [" + std::to_string(offset) + ", " + std::to_string(file_->size()) + ")";
  if (offset >= file_->size()) throw FormatError(name_ + ": safetensors image starts past the end of the file");
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t aligned = offset - offset % page;
  map_len_ = static_cast<size_t>(file_->size() - aligned);
  map_ = ::mmap(nullptr, map_len_, PROT_READ, MAP_PRIVATE, file_->fd(), static_cast<off_t>(aligned));
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw FormatError(name_ + ": cannot map: " + std::strerror(errno));
  }
  const auto* base = static_cast<const uint8_t*>(map_) + (offset - aligned);
  reader_ = std::make_unique<safetensors::Reader>(
      safetensors::Reader::from_buffer(name_, base, file_->size() - offset));
  const auto it = reader_->metadata().find(kShardingInfoKey);
  if (it == reader_->metadata().end()) return;
  has_sharding_info_ = true;
  const nlohmann::json info =
      safetensors::parse_strict_json(name_, kShardingInfoKey, it->second.data(), it->second.size());
  if (!info.is_object()) throw FormatError(name_ + ": " + kShardingInfoKey + " is not a JSON object");
  for (const auto& [fqn, v] : info.items()) {
    const auto so = v.is_object() ? v.find("saved_offsets") : v.end();
    if (!v.is_object() || so == v.end() || !so->is_array())
      throw FormatError(name_ + ": " + kShardingInfoKey + " entry " + safetensors::quote_name(fqn) +
                        " has no saved_offsets array");
    std::vector<uint64_t> offs;
    for (const auto& x : *so) {
      uint64_t u = 0;
      if (!safetensors::json_to_u64(x, &u))
        throw FormatError(name_ + ": " + kShardingInfoKey + " entry " + safetensors::quote_name(fqn) +
                          " has a saved offset that is not an integer >= 0");
      offs.push_back(u);
    }
    saved_offsets_.emplace(fqn, std::move(offs));
  }
}

SafetensorsImage::~SafetensorsImage() {
  reader_.reset();
  if (map_) ::munmap(map_, map_len_);
}

const safetensors::TensorInfo& SafetensorsImage::chunk(const std::string& fqn,
                                                       const std::vector<uint64_t>& chunk_offsets) const {
  const safetensors::TensorInfo* t = reader_->find(fqn);
  if (!t) throw FormatError(name_ + ": safetensors image has no tensor " + safetensors::quote_name(fqn));
  if (has_sharding_info_) {
    const auto it = saved_offsets_.find(fqn);
    if (it == saved_offsets_.end())
      throw FormatError(name_ + ": " + kShardingInfoKey + " has no entry for " + safetensors::quote_name(fqn));
    if (it->second != chunk_offsets)
      throw FormatError(name_ + ": tensor " + safetensors::quote_name(fqn) + " was saved at offsets " +
                        shape_string(it->second) + ", the metadata's chunk is at " +
                        shape_string(chunk_offsets));
  } else if (std::any_of(chunk_offsets.begin(), chunk_offsets.end(), [](uint64_t o) { return o != 0; })) {
    throw FormatError(name_ + ": no " + std::string(kShardingInfoKey) + " to place tensor " +
                      safetensors::quote_name(fqn) + " at offsets " + shape_string(chunk_offsets));
  }
  return *t;
}

}  // namespace fpg::dcp
