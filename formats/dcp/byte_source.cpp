#include "formats/dcp/byte_source.h"

#include <cstring>

#include "core/error.h"
#include "formats/dcp/checkpoint_dir.h"

namespace fpg::dcp {
namespace {

void check_range(const ByteSource& s, uint64_t offset, uint64_t len) {
  if (offset > s.size() || len > s.size() - offset)
    throw InternalError(s.name() + ": read of [" + std::to_string(offset) + ", +" +
                        std::to_string(len) + ") outside the source");
}

std::string range_name(const DataFile& f, uint64_t offset, uint64_t length) {
  return f.path() + " [" + std::to_string(offset) + ", " + std::to_string(offset + length) + ")";
}

}  // namespace

std::vector<uint8_t> ByteSource::read_vector(uint64_t offset, uint64_t len) const {
  check_range(*this, offset, len);
  std::vector<uint8_t> v(static_cast<size_t>(len));
  read(offset, v.data(), len);
  return v;
}

void BufferSource::read(uint64_t offset, void* dst, uint64_t len) const {
  check_range(*this, offset, len);
  if (len) std::memcpy(dst, data_ + offset, static_cast<size_t>(len));
}

FileRangeSource::FileRangeSource(std::shared_ptr<const DataFile> file, uint64_t offset, uint64_t length)
    : file_(std::move(file)), offset_(offset), length_(length) {
  if (offset > file_->size() || length > file_->size() - offset)
    throw FormatError(file_->path() + ": stored range [" + std::to_string(offset) + ", +" +
                      std::to_string(length) + ") lies outside the file (" +
                      std::to_string(file_->size()) + " bytes)");
  name_ = range_name(*file_, offset, length);
}

void FileRangeSource::will_need(uint64_t offset, uint64_t len) const {
  if (offset < length_) file_->will_need(offset_ + offset, std::min(len, length_ - offset));
}

void FileRangeSource::read(uint64_t offset, void* dst, uint64_t len) const {
  check_range(*this, offset, len);
  file_->read(offset_ + offset, dst, len);
}

}  // namespace fpg::dcp
