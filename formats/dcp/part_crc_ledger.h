// The CRC-32 of a torch.save record read in parts, checked once the parts cover it.
//
// A parameter's optimizer state in a Megatron bucket is a slice of one DP rank's shard: reading the
// whole shard for each slice (to check its CRC) multiplies what the disk reads by the number of
// slices in flight at once. Each part is read alone instead, its CRC computed as it is read and
// recorded here; when the recorded parts cover the record, their CRCs are combined in order
// (crc32_concat) and compared with the zip directory's. What is never read in part (padding between
// parameters) is read at the end, for its CRC only (gaps()).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fpg::dcp {

class PartCrcLedger {
 public:
  using ItemKey = std::pair<size_t, size_t>;  // (metadata entry, chunk)

  // Records bytes [offset, offset + size) of the record of `item`, `record_size` bytes whose CRC is
  // `record_crc`. A part overlapping one recorded before is not recorded (its bytes are checked by
  // the other). When the parts cover the record, checks it: FormatError "<name>: CRC-32 ..." on a
  // mismatch.
  void add(const ItemKey& item, const std::string& name, uint64_t record_size, uint32_t record_crc, uint64_t offset,
           uint64_t size, uint32_t crc);

  struct Gap {
    ItemKey item;
    uint64_t offset, size;
  };
  // The byte ranges of records read in part and not yet covered, in item order.
  std::vector<Gap> gaps() const;
  // Records the CRC of a gap's bytes, read by the caller: add() with the record's own size and CRC.
  void fill(const Gap& gap, uint32_t crc);
  // Records with parts not yet covering them.
  size_t pending() const;

 private:
  struct Item {
    std::string name;
    uint64_t size = 0;
    uint32_t crc = 0;
    uint64_t covered = 0;
    std::map<uint64_t, std::pair<uint64_t, uint32_t>> parts;  // offset -> (size, crc)
  };
  mutable std::mutex mu_;
  std::map<ItemKey, Item> items_;  // under mu_
};

}  // namespace fpg::dcp
