// The zip container of torch.save, written as torch's PyTorchStreamWriter writes it (caffe2/serialize/
// inline_container.cc over its miniz), byte for byte:
//  - every record stored (method 0), under one folder ("archive/" for a stream), in write order;
//  - a local header with zero time, date, CRC and sizes, flags 0x0808 (sizes in a data descriptor,
//    UTF-8 name; 0x0800 and no descriptor for an empty record) and an extra field "FB" + 'Z' padding
//    that puts the record's data at a multiple of 64 bytes in the archive;
//  - ZIP64 where a record or its offset reaches 0xFFFFFFFF: a ZIP64 extra field (uncompressed size,
//    compressed size 0, local header offset, as needed) before the padding, a 24-byte descriptor, and
//    the 32-bit fields of the central directory set to 0xFFFFFFFF;
//  - at the end, the `version` record ("3\n"), the `.data/serialization_id` record, the central
//    directory, a ZIP64 end of central directory record and locator (always, as torch writes them)
//    and the end of central directory record.
// The serialization id is torch's: 20 digits of std::hash combined over the record names in the
// iteration order of a std::unordered_set of them, and 20 digits of the CRC-32s combined over the
// written data descriptors — computed with the same standard library types torch uses, so it equals
// torch's where both are built on the same library (libstdc++ on Linux).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "formats/dcp/byte_sink.h"

namespace fpg::dcp {

constexpr uint64_t kTorchRecordAlignment = 64;  // torch's kFieldAlignment

class ZipWriter {
 public:
  explicit ZipWriter(ByteSink sink, std::string archive_name = "archive");

  // A record whose bytes are in memory.
  void write_record(std::string_view name, const void* data, uint64_t size);
  // A record of `size` bytes supplied by `fill` in blocks of at most `block_bytes`, through one buffer.
  void write_record(std::string_view name, uint64_t size, const FillBytes& fill, size_t block_bytes);
  // A record of `size` bytes lent by `borrow` in blocks of at most `block_bytes`, written as lent; a
  // block's CRC-32, where lent with it, is combined rather than computed.
  void write_record(std::string_view name, uint64_t size, const BorrowBytes& borrow, size_t block_bytes);

  // Writes `version`, `.data/serialization_id`, the central directory and the end records.
  void finish();

  uint64_t bytes_written() const { return pos_; }

 private:
  struct Entry {
    std::string name;  // with the archive folder
    uint64_t header_offset = 0;
    uint64_t size = 0;
    uint32_t crc = 0;
  };
  void emit(const void* data, size_t size);
  void begin_record(std::string_view name, uint64_t size);
  void end_record(uint32_t crc);
  std::string serialization_id() const;

  ByteSink sink_;
  std::string folder_;  // "archive/"
  uint64_t pos_ = 0;
  std::vector<Entry> entries_;
  std::unordered_set<std::string> names_;  // record names without the folder, as torch's files_written_
  uint64_t combined_crc_ = 0;
  bool finished_ = false;
};

}  // namespace fpg::dcp
