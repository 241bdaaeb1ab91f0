// A DCP item stored through torch's ZStandard stream extension
// (`FileSystemWriter(..., _extensions=[ZStandard()])`): its storage entry lists the transform
// descriptor "stream.zstd/1" and its bytes on disk are one or more zstd frames whose content is the
// item as it would otherwise be stored (a torch.save archive, or a bytes item's bytes).
//
// Decoding streams the compressed range from its file and keeps only what the frames produce, in
// blocks, up to a bound the caller derives from the metadata (a tensor chunk: its bytes plus the
// archive around them): neither the frame's declared content size nor a window larger than that
// bound is trusted. A stream that is corrupt, ends inside a frame, or produces more than the bound
// is refused (fpg::FormatError naming the item).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/dcp/byte_source.h"

namespace fpg::dcp {

// The one stream transform read: torch's registry name and the major version it accepts.
constexpr const char* kZstdTransform = "stream.zstd";

// Whether `descriptors` (a storage entry's transform_descriptors) are torch's ZStandard extension,
// alone: "stream.zstd/1" (any 1.x). Empty descriptors are not. Throws fpg::FormatError, `where`
// first, naming the descriptor, for any other transform, another zstd version, or a chain of
// several transforms.
bool is_zstd_transform(const std::vector<std::string>& descriptors, const std::string& where);

// A decoded item: the bytes the frames produced, held in blocks of at most 4 MiB so that growing it
// never copies what is already decoded.
class DecodedItem final : public ByteSource {
 public:
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, void* dst, uint64_t len) const override;
  const std::string& name() const override { return name_; }

 private:
  friend std::shared_ptr<const DecodedItem> decode_zstd_item(const ByteSource&, uint64_t, const std::string&);
  std::vector<std::unique_ptr<uint8_t[]>> blocks_;
  uint64_t size_ = 0;
  std::string name_;
};

// Decodes every frame of `compressed`, producing at most `most` bytes: fpg::FormatError, `what`
// first (the file, the key), when the stream is empty, does not start as a zstd frame, is corrupt,
// ends inside a frame, or produces more than `most` bytes.
std::shared_ptr<const DecodedItem> decode_zstd_item(const ByteSource& compressed, uint64_t most,
                                                    const std::string& what);

// Whether the stream's first frame is whole and decodes to nothing (what torch's SAFETENSORS
// serialization records in place of a tensor's elements under the ZStandard extension).
bool zstd_first_frame_is_empty(const ByteSource& compressed);

// The first min(n, decoded size) bytes the stream produces, without decoding the rest (what the item
// is, from its first bytes). Errors as decode_zstd_item's, for the part decoded.
std::vector<uint8_t> decode_zstd_prefix(const ByteSource& compressed, size_t n, const std::string& what);

}  // namespace fpg::dcp
