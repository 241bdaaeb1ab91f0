// PartCrcLedger: a record's CRC checked from parts recorded in any order, gaps filled at the end.
#include <cstdint>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "formats/dcp/part_crc_ledger.h"
#include "formats/dcp/zip/crc32.h"

using namespace fpg;
using namespace fpg::dcp;

namespace {

std::vector<uint8_t> record(size_t n) {
  std::vector<uint8_t> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = static_cast<uint8_t>(i * 131 + 7);
  return r;
}

uint32_t crc_of(const std::vector<uint8_t>& r, uint64_t at, uint64_t n) { return crc32_update(0, r.data() + at, n); }

}  // namespace

TEST_CASE("PartCrcLedger checks a record once its parts cover it, in any order", "[dcp]") {
  const auto r = record(10000);
  const uint32_t whole = crc_of(r, 0, r.size());
  PartCrcLedger ledger;
  const PartCrcLedger::ItemKey key{3, 1};
  ledger.add(key, "rec", r.size(), whole, 6000, 4000, crc_of(r, 6000, 4000));
  ledger.add(key, "rec", r.size(), whole, 0, 2500, crc_of(r, 0, 2500));
  CHECK(ledger.pending() == 1);
  // An overlapping part is not recorded: it leaves the gap as it was.
  ledger.add(key, "rec", r.size(), whole, 2000, 1000, crc_of(r, 2000, 1000));
  const auto gaps = ledger.gaps();
  REQUIRE(gaps.size() == 1);
  CHECK(gaps[0].offset == 2500);
  CHECK(gaps[0].size == 3500);
  ledger.fill(gaps[0], crc_of(r, 2500, 3500));
  CHECK(ledger.pending() == 0);
  CHECK(ledger.gaps().empty());
}

TEST_CASE("PartCrcLedger names the record whose parts do not give its CRC", "[dcp]") {
  auto r = record(4096);
  const uint32_t whole = crc_of(r, 0, r.size());
  r[3000] ^= 0x10;  // the bytes read differ from those checksummed when it was written
  PartCrcLedger ledger;
  ledger.add({0, 0}, "ckpt: key 'w' chunk 0", r.size(), whole, 0, 2048, crc_of(r, 0, 2048));
  try {
    ledger.add({0, 0}, "ckpt: key 'w' chunk 0", r.size(), whole, 2048, 2048, crc_of(r, 2048, 2048));
    FAIL("no error");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()).find("ckpt: key 'w' chunk 0: CRC-32") != std::string::npos);
  }
  CHECK(ledger.pending() == 0);
}

TEST_CASE("PartCrcLedger refuses a part outside its record", "[dcp]") {
  PartCrcLedger ledger;
  CHECK_THROWS_AS(ledger.add({0, 0}, "rec", 100, 0, 90, 20, 0), InternalError);
}
