#include "formats/dcp/zip/zip_archive.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "formats/dcp/zip/crc32.h"
#include "formats/safetensors/format.h"

namespace fpg::dcp {
namespace {

constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kLocatorSize = 20;
constexpr uint64_t kZip64EocdSize = 56;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kLocalSize = 30;
constexpr uint64_t kMaxCentralDirectory = uint64_t{256} << 20;

uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

}  // namespace

ZipArchive::ZipArchive(const ByteSource& source) : source_(source) {
  const std::string& src = source.name();
  auto fail = [&](const std::string& what) -> FormatError { return FormatError(src + ": zip " + what); };
  const uint64_t size = source.size();
  if (size < kEocdSize) throw fail("archive of " + std::to_string(size) + " bytes is too short");

  // End of central directory: the last signature whose comment reaches exactly the end. torch writes
  // no comment, so the last 22 bytes are tried before the longest comment's reach.
  auto find_eocd = [&](const std::vector<uint8_t>& tail) -> int64_t {
    for (int64_t i = static_cast<int64_t>(tail.size() - kEocdSize); i >= 0; --i) {
      const uint8_t* p = tail.data() + i;
      if (get(p, 4) == kEocdSig && get(p + 20, 2) == tail.size() - static_cast<uint64_t>(i) - kEocdSize) return i;
    }
    return -1;
  };
  std::vector<uint8_t> tail = source.read_vector(size - kEocdSize, kEocdSize);
  int64_t found = find_eocd(tail);
  if (found < 0) {
    const uint64_t reach = std::min<uint64_t>(size, kEocdSize + 0xFFFF);
    tail = source.read_vector(size - reach, reach);
    found = find_eocd(tail);
  }
  if (found < 0) throw fail("end of central directory not found (not a zip archive, or truncated)");
  const uint64_t tail_len = tail.size();
  const uint8_t* e = tail.data() + found;
  const uint64_t eocd_pos = size - tail_len + static_cast<uint64_t>(found);
  if (get(e + 4, 2) != 0 || get(e + 6, 2) != 0 || get(e + 8, 2) != get(e + 10, 2))
    throw fail("spans several disks, which is not supported");
  uint64_t count = get(e + 10, 2);
  uint64_t cd_size = get(e + 12, 4);
  uint64_t cd_offset = get(e + 16, 4);
  uint64_t cd_limit = eocd_pos;

  bool zip64 = false;
  if (eocd_pos >= kLocatorSize) {
    uint8_t loc[kLocatorSize];
    source.read(eocd_pos - kLocatorSize, loc, kLocatorSize);
    if (get(loc, 4) == kZip64LocatorSig) {
      zip64 = true;
      const uint64_t rec = get(loc + 8, 8);
      if (get(loc + 4, 4) != 0 || get(loc + 16, 4) > 1) throw fail("spans several disks, which is not supported");
      if (rec > eocd_pos - kLocatorSize || eocd_pos - kLocatorSize - rec < kZip64EocdSize)
        throw fail("ZIP64 end record offset " + std::to_string(rec) + " is out of range");
      uint8_t z[kZip64EocdSize];
      source.read(rec, z, kZip64EocdSize);
      if (get(z, 4) != kZip64EocdSig) throw fail("ZIP64 end record not found at " + std::to_string(rec));
      if (get(z + 16, 4) != 0 || get(z + 20, 4) != 0 || get(z + 24, 8) != get(z + 32, 8))
        throw fail("spans several disks, which is not supported");
      count = get(z + 32, 8);
      cd_size = get(z + 40, 8);
      cd_offset = get(z + 48, 8);
      cd_limit = rec;
    }
  }
  if (!zip64 && (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF))
    throw fail("needs a ZIP64 end record and has none");
  if (cd_offset > cd_limit || cd_size > cd_limit - cd_offset)
    throw fail("central directory [" + std::to_string(cd_offset) + ", +" + std::to_string(cd_size) +
               ") runs past its end records at " + std::to_string(cd_limit));
  if (cd_size > kMaxCentralDirectory) throw fail("central directory of " + std::to_string(cd_size) + " bytes is too large");
  if (count > cd_size / kCentralSize)
    throw fail("declares " + std::to_string(count) + " entries in a " + std::to_string(cd_size) +
               "-byte central directory");

  const std::vector<uint8_t> cd = source.read_vector(cd_offset, cd_size);
  struct Span {
    uint64_t begin, end;
    size_t entry;
  };
  std::vector<Span> spans;
  entries_.reserve(static_cast<size_t>(count));
  uint64_t at = 0;
  for (uint64_t k = 0; k < count; ++k) {
    if (cd_size - at < kCentralSize) throw fail("central directory entry " + std::to_string(k) + " is truncated");
    const uint8_t* c = cd.data() + at;
    if (get(c, 4) != kCentralSig) throw fail("central directory entry " + std::to_string(k) + " has a bad signature");
    const uint64_t flags = get(c + 8, 2), method = get(c + 10, 2);
    const auto crc = static_cast<uint32_t>(get(c + 16, 4));
    uint64_t csize = get(c + 20, 4), usize = get(c + 24, 4);
    const uint64_t name_len = get(c + 28, 2), extra_len = get(c + 30, 2), comment_len = get(c + 32, 2);
    uint64_t disk = get(c + 34, 2), local = get(c + 42, 4);
    if (cd_size - at - kCentralSize < name_len + extra_len + comment_len)
      throw fail("central directory entry " + std::to_string(k) + " is truncated");
    ZipEntry entry;
    entry.name.assign(reinterpret_cast<const char*>(c + kCentralSize), static_cast<size_t>(name_len));
    const std::string quoted = safetensors::quote_name(entry.name);
    // ZIP64 extended information: the 64-bit values of the fields set to all ones, in this order.
    const uint8_t* x = c + kCentralSize + name_len;
    for (uint64_t xo = 0; xo + 4 <= extra_len;) {
      const uint64_t id = get(x + xo, 2), len = get(x + xo + 2, 2);
      if (xo + 4 + len > extra_len) throw fail("entry " + quoted + " has a truncated extra field");
      if (id == 0x0001) {
        const uint8_t* f = x + xo + 4;
        uint64_t used = 0;
        auto next = [&](uint64_t& v, int bytes) {
          if (used + static_cast<uint64_t>(bytes) > len) throw fail("entry " + quoted + " has a short ZIP64 field");
          v = get(f + used, bytes);
          used += static_cast<uint64_t>(bytes);
        };
        if (usize == 0xFFFFFFFF) next(usize, 8);
        if (csize == 0xFFFFFFFF) next(csize, 8);
        if (local == 0xFFFFFFFF) next(local, 8);
        if (disk == 0xFFFF) next(disk, 4);
      }
      xo += 4 + len;
    }
    if (disk != 0) throw fail("entry " + quoted + " is on another disk");
    if (flags & 0x1) throw fail("entry " + quoted + " is encrypted, which is not supported");
    if (method != 0)
      throw fail("entry " + quoted + " is compressed (method " + std::to_string(method) +
                 "); only stored entries are read, as torch.save writes them");
    if (csize != usize)
      throw fail("stored entry " + quoted + " has compressed size " + std::to_string(csize) +
                 " and size " + std::to_string(usize));

    if (local > cd_offset || cd_offset - local < kLocalSize)
      throw fail("entry " + quoted + " has its local header outside the archive data");
    uint8_t lh[kLocalSize];
    source.read(local, lh, kLocalSize);
    if (get(lh, 4) != kLocalSig) throw fail("entry " + quoted + " has a bad local header signature");
    if (get(lh + 8, 2) != 0) throw fail("entry " + quoted + ": local header says compressed, directory says stored");
    if (get(lh + 6, 2) & 0x1) throw fail("entry " + quoted + " is encrypted, which is not supported");
    const uint64_t lname = get(lh + 26, 2), lextra = get(lh + 28, 2);
    const uint64_t data = local + kLocalSize + lname + lextra;
    if (data > cd_offset || usize > cd_offset - data)
      throw fail("entry " + quoted + " data [" + std::to_string(data) + ", +" + std::to_string(usize) +
                 ") runs into the central directory at " + std::to_string(cd_offset));
    if (lname != name_len || source.read_vector(local + kLocalSize, lname) !=
                                 std::vector<uint8_t>(entry.name.begin(), entry.name.end()))
      throw fail("entry " + quoted + ": local header names another file");
    entry.data_offset = data;
    entry.size = usize;
    entry.crc32 = crc;
    if (!by_name_.emplace(entry.name, entries_.size()).second) throw fail("entry " + quoted + " appears twice");
    spans.push_back({local, data + usize, entries_.size()});
    entries_.push_back(std::move(entry));
    at += kCentralSize + name_len + extra_len + comment_len;
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      throw fail("entries " + safetensors::quote_name(entries_[spans[i - 1].entry].name) + " and " +
                 safetensors::quote_name(entries_[spans[i].entry].name) + " overlap");
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

void ZipArchive::read(const ZipEntry& entry, void* dst) const {
  // Block by block, so the CRC reads each block while it is still in the CPU's cache; a large entry
  // is asked for whole first, so the disk reads ahead of the blocks.
  constexpr uint64_t kBlock = uint64_t{1} << 20;
  if (entry.size > kBlock) source_.will_need(entry.data_offset, entry.size);
  auto* out = static_cast<uint8_t*>(dst);
  uint32_t crc = 0;
  for (uint64_t at = 0; at < entry.size; at += kBlock) {
    const uint64_t n = std::min(kBlock, entry.size - at);
    source_.read(entry.data_offset + at, out + at, n);
    crc = crc32_update(crc, out + at, n);
  }
  if (crc != entry.crc32)
    throw FormatError(source_.name() + ": zip entry " + safetensors::quote_name(entry.name) +
                      " has CRC-32 " + hex32(crc) + ", the directory records " + hex32(entry.crc32));
}

uint32_t ZipArchive::read_range(const ZipEntry& entry, uint64_t offset, uint64_t size, void* dst) const {
  if (offset > entry.size || size > entry.size - offset)
    throw InternalError(source_.name() + ": zip entry " + safetensors::quote_name(entry.name) + ": bytes [" +
                        std::to_string(offset) + ", " + std::to_string(offset + size) + ") asked of " +
                        std::to_string(entry.size));
  constexpr uint64_t kBlock = uint64_t{1} << 20;
  if (size > kBlock) source_.will_need(entry.data_offset + offset, size);
  auto* out = static_cast<uint8_t*>(dst);
  uint32_t crc = 0;
  for (uint64_t at = 0; at < size; at += kBlock) {
    const uint64_t n = std::min(kBlock, size - at);
    source_.read(entry.data_offset + offset + at, out + at, n);
    crc = crc32_update(crc, out + at, n);
  }
  return crc;
}

std::vector<uint8_t> ZipArchive::read_all(const ZipEntry& entry, uint64_t max_size) const {
  if (entry.size > max_size)
    throw FormatError(source_.name() + ": zip entry " + safetensors::quote_name(entry.name) + " is " +
                      std::to_string(entry.size) + " bytes, more than the " + std::to_string(max_size) +
                      " accepted");
  std::vector<uint8_t> out(static_cast<size_t>(entry.size));
  read(entry, out.data());
  return out;
}

}  // namespace fpg::dcp
