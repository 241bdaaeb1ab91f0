// Helpers for the DCP tests: a pickle builder, a stored-zip builder, and the fixtures' paths and
// ground truth (testdata/dcp, written by testdata/dcp/make_dcp_fixtures.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/dcp/pickle/pickle_reader.h"
#include "formats/dcp/zip/crc32.h"
#include "formats/dcp/zip/zip_archive.h"
#include "formats/safetensors/reader.h"
#include "safetensors_test_util.h"

namespace fpg::dcptest {

using sttest::contains;
using sttest::format_error;

inline std::string fixture(const std::string& rel) { return std::string(FPG_TESTDATA_DIR) + "/dcp/" + rel; }

// Pickle bytes, opcode by opcode.
class Pickle {
 public:
  Pickle& proto(int v = 4) { return raw("\x80").byte(v); }
  Pickle& raw(const std::string& s) {
    b_ += s;
    return *this;
  }
  Pickle& byte(int v) {
    b_ += static_cast<char>(v);
    return *this;
  }
  Pickle& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  Pickle& str(const std::string& s) { return raw("\x8c").byte(static_cast<int>(s.size())).raw(s); }  // SHORT_BINUNICODE
  Pickle& binunicode(const std::string& s) { return raw("X").le(s.size(), 4).raw(s); }
  Pickle& stack_global(const std::string& m, const std::string& n) { return str(m).str(n).raw("\x93"); }
  Pickle& global(const std::string& m, const std::string& n) { return raw("c" + m + "\n" + n + "\n"); }
  Pickle& int1(int v) { return raw("K").byte(v); }
  Pickle& stop() { return raw("."); }
  const std::string& bytes() const { return b_; }

 private:
  std::string b_;
};

inline fpg::dcp::PickleDocument decode(const std::string& b,
                                       const fpg::dcp::AllowList& allow = fpg::dcp::AllowList::dcp_metadata(),
                                       const fpg::dcp::PickleLimits& limits = {}) {
  return fpg::dcp::read_pickle("test.pkl", reinterpret_cast<const uint8_t*>(b.data()), b.size(), allow, limits);
}

inline fpg::dcp::Value decode_value(const std::string& b,
                                    const fpg::dcp::AllowList& allow = fpg::dcp::AllowList::dcp_metadata()) {
  const auto doc = decode(b, allow);
  return doc.to_value(doc.root());
}

// A zip archive of stored entries as torch writes them (local headers with data descriptors, a
// central directory, optionally ZIP64 end records).
struct ZipEntrySpec {
  std::string name;
  std::string data;
  uint16_t method = 0;
  bool bad_crc = false;
};

inline std::string make_zip(const std::vector<ZipEntrySpec>& entries, bool zip64) {
  auto le = [](std::string& s, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  std::string out, cd;
  for (const ZipEntrySpec& e : entries) {
    uint32_t crc = fpg::dcp::crc32_update(0, e.data.data(), e.data.size());
    if (e.bad_crc) crc ^= 1;
    const uint64_t local = out.size();
    le(out, 0x04034b50, 4);
    le(out, 20, 2);
    le(out, 0x0808, 2);
    le(out, e.method, 2);
    le(out, 0, 4);   // time, date
    out.append(12, '\0');  // crc and sizes: in the data descriptor
    le(out, e.name.size(), 2);
    le(out, 4, 2);  // extra: padding field
    out += e.name;
    le(out, 0x4246, 2);
    le(out, 0, 2);
    out += e.data;
    le(out, 0x08074b50, 4);
    le(out, crc, 4);
    le(out, e.data.size(), 4);
    le(out, e.data.size(), 4);
    le(cd, 0x02014b50, 4);
    le(cd, 0, 2);
    le(cd, 20, 2);
    le(cd, 0x0808, 2);
    le(cd, e.method, 2);
    le(cd, 0, 4);
    le(cd, crc, 4);
    le(cd, e.data.size(), 4);
    le(cd, e.data.size(), 4);
    le(cd, e.name.size(), 2);
    le(cd, 0, 2);  // extra
    le(cd, 0, 2);  // comment
    le(cd, 0, 2);  // disk
    le(cd, 0, 2);
    le(cd, 0, 4);
    le(cd, local, 4);
    cd += e.name;
  }
  const uint64_t cd_offset = out.size();
  out += cd;
  if (zip64) {
    const uint64_t rec = out.size();
    le(out, 0x06064b50, 4);
    le(out, 44, 8);
    le(out, 45, 2);
    le(out, 45, 2);
    le(out, 0, 4);
    le(out, 0, 4);
    le(out, entries.size(), 8);
    le(out, entries.size(), 8);
    le(out, cd.size(), 8);
    le(out, cd_offset, 8);
    le(out, 0x07064b50, 4);
    le(out, 0, 4);
    le(out, rec, 8);
    le(out, 1, 4);
  }
  le(out, 0x06054b50, 4);
  le(out, 0, 2);
  le(out, 0, 2);
  le(out, zip64 ? 0xFFFF : entries.size(), 2);
  le(out, zip64 ? 0xFFFF : entries.size(), 2);
  le(out, zip64 ? 0xFFFFFFFF : cd.size(), 4);
  le(out, zip64 ? 0xFFFFFFFF : cd_offset, 4);
  le(out, 0, 2);
  return out;
}

}  // namespace fpg::dcptest
