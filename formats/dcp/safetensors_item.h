// DCP's SAFETENSORS serialization (FileSystemWriter(serialization_format=SAFETENSORS)): a data file
// holds its bytes items first, then one safetensors image running to the end of the file with every
// tensor chunk of that file, each named by its fqn; the image's "__metadata__" holds
// DCP_SHARDING_INFO, JSON {fqn: {"saved_offsets": [...]}}, the chunk's offsets in the global tensor.
// Every tensor item of the file points at the image's first byte, with the chunk's byte size as its
// length (torch 2.15's own FileSystemReader cannot read these; this reader can).
//
// The image is validated by formats/safetensors (strict header, exact coverage) over a memory map of
// [offset, end of file); a chunk is found by fqn and must have the saved offsets, shape and dtype the
// metadata records.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/dcp/checkpoint_dir.h"
#include "formats/safetensors/reader.h"

namespace fpg::dcp {

class SafetensorsImage {
 public:
  // Maps and validates the image starting at `offset` of `file`.
  SafetensorsImage(std::shared_ptr<const DataFile> file, uint64_t offset);
  ~SafetensorsImage();
  SafetensorsImage(const SafetensorsImage&) = delete;
  SafetensorsImage& operator=(const SafetensorsImage&) = delete;

  const safetensors::Reader& reader() const { return *reader_; }
  const std::string& name() const { return name_; }

  // The tensor `fqn`, checked to be saved at `chunk_offsets` (DCP_SHARDING_INFO); throws
  // fpg::FormatError naming the image and the tensor.
  const safetensors::TensorInfo& chunk(const std::string& fqn, const std::vector<uint64_t>& chunk_offsets) const;

  // Whether the image's metadata holds DCP_SHARDING_INFO, and the offsets it gives `fqn` (nullptr
  // where it gives none).
  bool has_sharding_info() const { return has_sharding_info_; }
  const std::vector<uint64_t>* saved_offsets(const std::string& fqn) const {
    const auto it = saved_offsets_.find(fqn);
    return it == saved_offsets_.end() ? nullptr : &it->second;
  }

 private:
  std::shared_ptr<const DataFile> file_;
  std::string name_;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  std::unique_ptr<safetensors::Reader> reader_;
  std::map<std::string, std::vector<uint64_t>, std::less<>> saved_offsets_;
  bool has_sharding_info_ = false;
};

// Whether the first bytes of an item look like a safetensors image (an 8-byte header length, then
// '{') rather than a zip archive.
bool looks_like_safetensors(const uint8_t* head, size_t n);

}  // namespace fpg::dcp
