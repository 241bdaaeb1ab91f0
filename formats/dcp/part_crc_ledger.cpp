#include "formats/dcp/part_crc_ledger.h"

#include <cstdio>

#include "core/error.h"
#include "formats/dcp/zip/crc32.h"

namespace fpg::dcp {
namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

}  // namespace

void PartCrcLedger::add(const ItemKey& item, const std::string& name, uint64_t record_size, uint32_t record_crc,
                        uint64_t offset, uint64_t size, uint32_t crc) {
  if (size == 0) return;
  if (offset > record_size || size > record_size - offset)
    throw InternalError(name + ": a part [" + std::to_string(offset) + ", " + std::to_string(offset + size) +
                        ") outside the record's " + std::to_string(record_size) + " bytes");
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = items_.try_emplace(item);
  Item& r = it->second;
  if (fresh) {
    r.name = name;
    r.size = record_size;
    r.crc = record_crc;
  }
  // Disjoint from the neighbours, or not recorded.
  auto next = r.parts.lower_bound(offset);
  if (next != r.parts.end() && next->first < offset + size) return;
  if (next != r.parts.begin() && std::prev(next)->first + std::prev(next)->second.first > offset) return;
  r.parts.emplace_hint(next, offset, std::make_pair(size, crc));
  r.covered += size;
  if (r.covered < r.size) return;
  uint32_t whole = 0;
  for (const auto& [at, part] : r.parts) whole = crc32_concat(whole, part.second, part.first);
  const Item done = std::move(r);
  items_.erase(it);
  if (whole != done.crc)
    throw FormatError(done.name + ": CRC-32 " + hex32(whole) + " of the record read in " +
                      std::to_string(done.parts.size()) + " parts; the zip directory records " + hex32(done.crc));
}

std::vector<PartCrcLedger::Gap> PartCrcLedger::gaps() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Gap> out;
  for (const auto& [key, r] : items_) {
    uint64_t at = 0;
    for (const auto& [offset, part] : r.parts) {
      if (offset > at) out.push_back({key, at, offset - at});
      at = offset + part.first;
    }
    if (at < r.size) out.push_back({key, at, r.size - at});
  }
  return out;
}

void PartCrcLedger::fill(const Gap& gap, uint32_t crc) {
  std::string name;
  uint64_t size = 0;
  uint32_t record_crc = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = items_.find(gap.item);
    if (it == items_.end()) return;  // covered meanwhile
    name = it->second.name;
    size = it->second.size;
    record_crc = it->second.crc;
  }
  add(gap.item, name, size, record_crc, gap.offset, gap.size, crc);
}

size_t PartCrcLedger::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return items_.size();
}

}  // namespace fpg::dcp
