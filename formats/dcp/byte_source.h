// A byte range read at any offset: a stored item inside a checkpoint file, or a buffer in memory.
// The zip and torch.save readers work on these so that an item is never read whole unless needed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fpg::dcp {

class DataFile;

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads [offset, offset + len), which the caller keeps inside [0, size()) (fpg::InternalError
  // otherwise); throws fpg::FormatError on a read error.
  virtual void read(uint64_t offset, void* dst, uint64_t len) const = 0;
  // Names the source in messages: "ckpt/__0_0.distcp [4096, 5673)".
  virtual const std::string& name() const = 0;
  // A hint that [offset, offset + len) will be read soon (files start reading it in the background).
  virtual void will_need(uint64_t /*offset*/, uint64_t /*len*/) const {}

  // The whole of [offset, offset + len) in a new buffer.
  std::vector<uint8_t> read_vector(uint64_t offset, uint64_t len) const;
};

// A buffer the caller keeps alive.
class BufferSource final : public ByteSource {
 public:
  BufferSource(std::string name, const uint8_t* data, uint64_t size)
      : name_(std::move(name)), data_(data), size_(size) {}
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, void* dst, uint64_t len) const override;
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  const uint8_t* data_;
  uint64_t size_;
};

// [offset, offset + length) of an open data file; the constructor checks the range lies inside the
// file (fpg::FormatError naming the file and the range otherwise).
class FileRangeSource final : public ByteSource {
 public:
  FileRangeSource(std::shared_ptr<const DataFile> file, uint64_t offset, uint64_t length);
  uint64_t size() const override { return length_; }
  void read(uint64_t offset, void* dst, uint64_t len) const override;
  const std::string& name() const override { return name_; }
  void will_need(uint64_t offset, uint64_t len) const override;
  uint64_t file_offset() const { return offset_; }

 private:
  std::shared_ptr<const DataFile> file_;
  uint64_t offset_;
  uint64_t length_;
  std::string name_;
};

}  // namespace fpg::dcp
