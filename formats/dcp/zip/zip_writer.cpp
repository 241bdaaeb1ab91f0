#include "formats/dcp/zip/zip_writer.h"

#include <algorithm>
#include <cstdio>

#include "core/printable.h"
#include "core/error.h"
#include "formats/dcp/zip/crc32.h"
#include "formats/dcp/zip/zip_archive.h"

namespace fpg::dcp {
namespace {

constexpr uint64_t kU32Max = 0xFFFFFFFFu;  // miniz's MZ_UINT32_MAX: a field at or past it goes to ZIP64
constexpr uint32_t kLocalHeaderSig = 0x04034b50, kCentralHeaderSig = 0x02014b50, kDescriptorSig = 0x08074b50,
                   kEndSig = 0x06054b50, kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr uint16_t kFlagDescriptor = 0x0008, kFlagUtf8 = 0x0800;
constexpr size_t kLocalHeaderSize = 30;

class Bytes {
 public:
  Bytes& u16(uint64_t v) { return le(v, 2); }
  Bytes& u32(uint64_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& text(std::string_view s) {
    b_.append(s);
    return *this;
  }
  const std::string& str() const { return b_; }

 private:
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  std::string b_;
};

// The ZIP64 extended information field as miniz writes it: only the values that overflow.
std::string zip64_extra(const uint64_t* uncompressed, const uint64_t* compressed, const uint64_t* offset) {
  Bytes body;
  if (uncompressed) body.u64(*uncompressed);
  if (compressed) body.u64(*compressed);
  if (offset) body.u64(*offset);
  Bytes field;
  field.u16(0x0001).u16(body.str().size()).text(body.str());
  return field.str();
}

uint64_t hash_combine(uint64_t seed, uint64_t value) {  // c10::hash_combine
  return seed ^ (value + 0x9e3779b9u + (seed << 6) + (seed >> 2));
}

}  // namespace

ZipWriter::ZipWriter(ByteSink sink, std::string archive_name)
    : sink_(std::move(sink)), folder_(std::move(archive_name) + "/") {}

void ZipWriter::emit(const void* data, size_t size) {
  if (size == 0) return;
  sink_(data, size);
  pos_ += size;
}

void ZipWriter::begin_record(std::string_view name, uint64_t size) {
  if (finished_) throw InternalError("torch zip: record written after finish()");
  if (names_.count(std::string(name)))
    throw InternalError("torch zip: record " + quoted_name(std::string(name)) + " written twice");
  const std::string full = folder_ + std::string(name);
  if (full.size() > 0xFFFF) throw UsageError("torch zip: record name longer than 65535 bytes");
  const uint64_t offset = pos_;
  const bool big_size = size >= kU32Max, big_offset = offset >= kU32Max;
  const uint64_t zero = 0;
  const std::string extra64 = (big_size || big_offset)
                                  ? zip64_extra(big_size ? &size : nullptr, big_size ? &zero : nullptr,
                                                big_offset ? &offset : nullptr)
                                  : std::string();
  // torch's getPadding: the "FB" field fills the header up to the next 64-byte boundary.
  const uint64_t start = offset + kLocalHeaderSize + full.size() + extra64.size() + 4;
  const uint64_t padding = (kTorchRecordAlignment - start % kTorchRecordAlignment) % kTorchRecordAlignment;
  Bytes h;
  h.u32(kLocalHeaderSig)
      .u16(0)  // version needed: 0 for stored records, as miniz writes it
      .u16(size > 0 ? kFlagDescriptor | kFlagUtf8 : kFlagUtf8)
      .u16(0)          // method: stored
      .u16(0).u16(0)   // time, date: torch's miniz is built without time
      .u32(0).u32(0).u32(0)  // CRC and sizes follow in the descriptor
      .u16(full.size())
      .u16(extra64.size() + 4 + padding)
      .text(full)
      .text(extra64)
      .text("FB")
      .u16(padding)
      .text(std::string(padding, 'Z'));
  emit(h.str().data(), h.str().size());
  entries_.push_back({full, offset, size, 0});
  names_.emplace(name);
}

void ZipWriter::end_record(uint32_t crc) {
  Entry& e = entries_.back();
  e.crc = crc;
  if (e.size == 0) return;  // miniz writes no descriptor for an empty record
  Bytes d;
  d.u32(kDescriptorSig).u32(crc);
  if (e.size >= kU32Max || e.header_offset >= kU32Max) d.u64(e.size).u64(e.size);
  else d.u32(e.size).u32(e.size);
  emit(d.str().data(), d.str().size());
  combined_crc_ = hash_combine(combined_crc_, crc);
}

void ZipWriter::write_record(std::string_view name, const void* data, uint64_t size) {
  begin_record(name, size);
  const auto* p = static_cast<const uint8_t*>(data);
  emit(p, size);
  end_record(crc32_update(0, p, size));
}

void ZipWriter::write_record(std::string_view name, uint64_t size, const FillBytes& fill, size_t block_bytes) {
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(std::max<size_t>(block_bytes, 1), size)));
  const BorrowBytes from_buffer = [&](uint64_t offset, size_t n) {
    fill(offset, buf.data(), n);
    return BorrowedBlock{buf.data(), n, std::nullopt};
  };
  write_record(name, size, from_buffer, buf.size());
}

void ZipWriter::write_record(std::string_view name, uint64_t size, const BorrowBytes& borrow, size_t block_bytes) {
  begin_record(name, size);
  const size_t block = std::max<size_t>(block_bytes, 1);
  uint32_t crc = 0;
  for (uint64_t off = 0; off < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block, size - off));
    const BorrowedBlock b = borrow(off, n);
    if (b.size != n || (n > 0 && !b.data))
      throw InternalError("torch zip: record " + quoted_name(std::string(name)) + ": asked for " + std::to_string(n) +
                          " bytes at " + std::to_string(off) + ", lent " + std::to_string(b.size));
    crc = b.crc32 ? crc32_concat(crc, *b.crc32, n) : crc32_update(crc, b.data, n);
    emit(b.data, n);
    off += n;
  }
  end_record(crc);
}

std::string ZipWriter::serialization_id() const {
  uint64_t names_hash = 0;
  for (const std::string& n : names_) names_hash = hash_combine(names_hash, std::hash<std::string>{}(n));
  char id[41];
  std::snprintf(id, sizeof id, "%020llu%020llu", static_cast<unsigned long long>(names_hash),
                static_cast<unsigned long long>(combined_crc_));
  return id;
}

void ZipWriter::finish() {
  if (finished_) throw InternalError("torch zip: finish() called twice");
  static constexpr char kVersion[] = "3\n";  // torch's kProducedFileFormatVersion
  write_record("version", kVersion, 2);
  const std::string id = serialization_id();
  write_record(".data/serialization_id", id.data(), id.size());
  finished_ = true;

  const uint64_t cd_offset = pos_;
  for (const Entry& e : entries_) {
    const bool big_size = e.size >= kU32Max, big_offset = e.header_offset >= kU32Max;
    const std::string extra64 =
        (big_size || big_offset) ? zip64_extra(big_size ? &e.size : nullptr, big_size ? &e.size : nullptr,
                                               big_offset ? &e.header_offset : nullptr)
                                 : std::string();
    Bytes c;
    c.u32(kCentralHeaderSig)
        .u16(0)  // version made by
        .u16(0)  // version needed
        .u16(e.size > 0 ? kFlagDescriptor | kFlagUtf8 : kFlagUtf8)
        .u16(0)
        .u16(0).u16(0)
        .u32(e.crc)
        .u32(std::min(e.size, kU32Max))
        .u32(std::min(e.size, kU32Max))
        .u16(e.name.size())
        .u16(extra64.size())
        .u16(0)  // comment
        .u16(0)  // disk
        .u16(0)  // internal attributes
        .u32(0)  // external attributes
        .u32(std::min(e.header_offset, kU32Max))
        .text(e.name)
        .text(extra64);
    emit(c.str().data(), c.str().size());
  }
  const uint64_t cd_size = pos_ - cd_offset, zip64_end_offset = pos_, n = entries_.size();
  Bytes end;
  end.u32(kZip64EndSig).u64(44).u16(0x031E).u16(0x002D).u32(0).u32(0).u64(n).u64(n).u64(cd_size).u64(cd_offset);
  end.u32(kZip64LocatorSig).u32(0).u64(zip64_end_offset).u32(1);
  end.u32(kEndSig).u16(0).u16(0)
      .u16(std::min<uint64_t>(n, 0xFFFF)).u16(std::min<uint64_t>(n, 0xFFFF))
      .u32(std::min(cd_size, kU32Max)).u32(std::min(cd_offset, kU32Max))
      .u16(0);
  emit(end.str().data(), end.str().size());
}

}  // namespace fpg::dcp
