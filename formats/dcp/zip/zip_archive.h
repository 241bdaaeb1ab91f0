// A read-only zip archive of stored (uncompressed) entries, as torch.save writes them.
//
// Read: the end of central directory record (found from the end, its comment length matching), the
// ZIP64 end record through its locator when present (torch always writes one), the central
// directory, and each entry's local header, which gives where its data starts (torch pads the local
// extra field to align data). Refused with fpg::FormatError naming the source and the entry: more than
// one disk, a directory outside the archive or overlapping its end records, a compressed (method ≠ 0)
// or encrypted entry, sizes that differ between compressed and uncompressed, a local header that
// disagrees with the central directory (name, method), entry data outside the archive or overlapping
// the central directory or another entry, a name repeated. Entry data is checked against its CRC-32
// when it is read whole.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "formats/dcp/byte_source.h"

namespace fpg::dcp {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // in the archive
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

class ZipArchive {
 public:
  // Parses the directory of `source`, which must outlive the archive.
  explicit ZipArchive(const ByteSource& source);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;
  const ByteSource& source() const { return source_; }

  // Reads the whole entry into `dst` (entry.size bytes) and checks its CRC-32.
  void read(const ZipEntry& entry, void* dst) const;
  // Reads bytes [offset, offset + size) of the entry into `dst` and returns their CRC-32, unchecked:
  // the caller checks the entry's CRC once its parts cover it (crc32_concat combines them).
  uint32_t read_range(const ZipEntry& entry, uint64_t offset, uint64_t size, void* dst) const;
  // The whole entry, CRC-checked, in a new buffer; refused if larger than `max_size`.
  std::vector<uint8_t> read_all(const ZipEntry& entry, uint64_t max_size) const;

 private:
  const ByteSource& source_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace fpg::dcp
