// BlocksAhead: items produced ahead in blocks are lent in order with their CRC-32, byte for byte what
// their fills give; a fill's error reaches the borrower of its bytes; a writer that stops early (the
// producer blocked on a full queue) does not hang the destructor; out-of-order asks are refused; where
// the system refuses the thread, the writer's asks are filled as they come.
#include <cstdint>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/thread_start.h"
#include "formats/dcp/blocks_ahead.h"
#include "formats/dcp/zip/crc32.h"

using namespace fpg;
using namespace fpg::dcp;

namespace {

// Item i's byte k is (i * 31 + k) mod 251.
FillBytes pattern(size_t i) {
  return [i](uint64_t offset, void* dst, size_t size) {
    auto* d = static_cast<uint8_t*>(dst);
    for (size_t k = 0; k < size; ++k) d[k] = static_cast<uint8_t>((i * 31 + offset + k) % 251);
  };
}

}  // namespace

TEST_CASE("blocks ahead: every item's blocks in order, with their CRC") {
  const std::vector<uint64_t> sizes = {0, 1, 100, 4096, 10000, 3};
  for (size_t block : {1, 7, 4096}) {
    std::vector<std::pair<uint64_t, FillBytes>> items;
    for (size_t i = 0; i < sizes.size(); ++i) items.emplace_back(sizes[i], pattern(i));
    BlocksAhead ahead(items, block, 3);
    for (size_t i = 0; i < sizes.size(); ++i) {
      const BorrowBytes lend = ahead.item(i);
      std::vector<uint8_t> want(sizes[i]);
      if (!want.empty()) pattern(i)(0, want.data(), want.size());
      for (uint64_t off = 0; off < sizes[i]; off += block) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(block, sizes[i] - off));
        const BorrowedBlock b = lend(off, n);
        REQUIRE(b.size == n);
        const auto* got = static_cast<const uint8_t*>(b.data);
        REQUIRE(std::vector<uint8_t>(got, got + n) == std::vector<uint8_t>(want.begin() + off, want.begin() + off + n));
        REQUIRE(b.crc32 == crc32_update(0, b.data, n));
      }
    }
  }
}

TEST_CASE("blocks ahead: errors reach the borrower; an early stop does not hang") {
  {
    std::vector<std::pair<uint64_t, FillBytes>> items = {
        {10, pattern(0)}, {10, [](uint64_t, void*, size_t) { throw FormatError("model.safetensors: read failed"); }}};
    BlocksAhead ahead(items, 4);
    const BorrowBytes first = ahead.item(0);
    first(0, 4), first(4, 4), first(8, 2);
    const BorrowBytes second = ahead.item(1);
    CHECK_THROWS_AS(second(0, 4), FormatError);
  }
  {
    std::vector<std::pair<uint64_t, FillBytes>> items;
    for (size_t i = 0; i < 100; ++i) items.emplace_back(1000, pattern(i));
    BlocksAhead ahead(items, 10, 2);
    ahead.item(0)(0, 10);  // then the writer gives up: the producer waits on a full queue
  }
  {
    std::vector<std::pair<uint64_t, FillBytes>> items = {{8, pattern(0)}, {8, pattern(1)}};
    BlocksAhead ahead(items, 8);
    CHECK_THROWS_AS(ahead.item(1)(0, 8), InternalError);
  }
}

TEST_CASE("blocks ahead: refused its thread, the writer fills each block as it asks") {
  size_t refused = 0;
  const fpg::ThreadStarter previous = set_thread_starter([&refused](std::function<void()>) -> std::thread {
    ++refused;
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  });
  {
    std::vector<std::pair<uint64_t, FillBytes>> items = {
        {10, pattern(0)}, {5, [](uint64_t, void*, size_t) { throw FormatError("model.safetensors: read failed"); }}};
    BlocksAhead ahead(items, 4);
    CHECK(refused == 1);
    const BorrowBytes lend = ahead.item(0);
    std::vector<uint8_t> want(10);
    pattern(0)(0, want.data(), want.size());
    for (uint64_t off = 0; off < 10; off += 4) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(4, 10 - off));
      const BorrowedBlock b = lend(off, n);
      const auto* got = static_cast<const uint8_t*>(b.data);
      CHECK(std::vector<uint8_t>(got, got + n) == std::vector<uint8_t>(want.begin() + off, want.begin() + off + n));
      CHECK(b.crc32 == crc32_update(0, b.data, n));
    }
    CHECK_THROWS_AS(ahead.item(1)(0, 4), FormatError);
  }
  set_thread_starter(previous);
}
