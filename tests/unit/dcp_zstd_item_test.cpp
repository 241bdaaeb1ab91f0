// Decoding items stored through torch's ZStandard stream extension (formats/dcp/zstd_item.h): the
// descriptors read and refused, whole and concatenated frames, and the hostile streams (a bomb past
// the bound, a truncated or corrupt stream, a frame declaring a window larger than the bound allows).
#include <zstd.h>

#include <cstring>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "dcp_test_util.h"
#include "formats/dcp/zstd_item.h"

using namespace fpg;
using namespace fpg::dcp;
using namespace fpg::dcptest;

namespace {

std::vector<uint8_t> compress(const std::vector<uint8_t>& data, int level = 3, bool content_size = false) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, content_size ? 1 : 0);
  ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
  std::vector<uint8_t> out(ZSTD_compressBound(data.size()) + 64);
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  ZSTD_inBuffer i{data.data(), data.size(), 0};
  // Streamed, as torch's writers do: no content size unless asked.
  while (ZSTD_compressStream2(c, &o, &i, ZSTD_e_end) != 0) {
  }
  ZSTD_freeCCtx(c);
  out.resize(o.pos);
  return out;
}

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  return v;
}

std::vector<uint8_t> decoded(const std::vector<uint8_t>& stream, uint64_t most) {
  const BufferSource src("item", stream.data(), stream.size());
  const auto item = decode_zstd_item(src, most, "f: key 'w'");
  std::vector<uint8_t> out(static_cast<size_t>(item->size()));
  item->read(0, out.data(), out.size());
  return out;
}

std::string decode_error(const std::vector<uint8_t>& stream, uint64_t most) {
  return format_error([&] { decoded(stream, most); });
}

}  // namespace

TEST_CASE("zstd item: the descriptors torch writes are read, any other refused by name", "[dcp][zstd]") {
  CHECK_FALSE(is_zstd_transform({}, "f"));
  CHECK(is_zstd_transform({"stream.zstd/1"}, "f"));
  CHECK(is_zstd_transform({"stream.zstd/1.2"}, "f"));
  CHECK(contains(format_error([] { is_zstd_transform({"stream.lz4/1"}, "f: key 'w'"); }), "'stream.lz4/1'"));
  CHECK(contains(format_error([] { is_zstd_transform({"stream.zstd/2"}, "f"); }), "version '2' is not supported"));
  CHECK(contains(format_error([] { is_zstd_transform({"stream.zstd"}, "f"); }), "version '' is not supported"));
  CHECK(contains(format_error([] { is_zstd_transform({"stream.zstd/1", "stream.zstd/1"}, "f"); }), "chain"));
}

TEST_CASE("zstd item: streams decode whole, across blocks and concatenated frames", "[dcp][zstd]") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{65536}, size_t{65537}, size_t{5} << 20}) {
    INFO(n);
    const std::vector<uint8_t> data = pattern(n);
    CHECK(decoded(compress(data), n) == data);
    CHECK(decoded(compress(data, 19, true), n + 100) == data);
  }
  const std::vector<uint8_t> a = pattern(1000), b = pattern(70000);
  std::vector<uint8_t> two = compress(a);
  const std::vector<uint8_t> second = compress(b);
  two.insert(two.end(), second.begin(), second.end());
  std::vector<uint8_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  CHECK(decoded(two, both.size()) == both);
  // The item read in parts across the block boundaries.
  const BufferSource src("item", two.data(), two.size());
  const auto item = decode_zstd_item(src, both.size(), "f");
  std::vector<uint8_t> part(3000);
  item->read(65000, part.data(), part.size());
  CHECK(std::memcmp(part.data(), both.data() + 65000, part.size()) == 0);
  CHECK(decode_zstd_prefix(src, 9, "f") == std::vector<uint8_t>(a.begin(), a.begin() + 9));
}

TEST_CASE("zstd item: hostile streams are refused, decoding no more than the bound", "[dcp][zstd]") {
  // A bomb: 64 MiB of zeros in a few kB, against a bound of 1 MiB.
  const std::vector<uint8_t> bomb = compress(std::vector<uint8_t>(size_t{64} << 20), 19);
  CHECK(bomb.size() < 16384);
  CHECK(contains(decode_error(bomb, 1 << 20), "f: key 'w': the zstd stream expands past the 1048576 bytes"));
  // Exactly the bound is accepted.
  CHECK(decoded(bomb, uint64_t{64} << 20).size() == size_t{64} << 20);
  // A frame that declares its content size is bounded alike (the size it declares sizes nothing).
  const std::vector<uint8_t> sized = compress(pattern(1000), 3, true);
  CHECK(contains(decode_error(sized, 999), "expands past the 999 bytes"));

  const std::vector<uint8_t> good = compress(pattern(200000));
  std::vector<uint8_t> cut(good.begin(), good.end() - 10);
  CHECK(contains(decode_error(cut, 200000), "f: key 'w': the zstd stream is truncated"));
  std::vector<uint8_t> flipped = good;
  flipped[flipped.size() / 2] ^= 0x5a;
  flipped[flipped.size() / 2 + 1] ^= 0xa5;
  CHECK(contains(decode_error(flipped, 200000), "f: key 'w': corrupt zstd stream"));
  std::vector<uint8_t> not_zstd = good;
  not_zstd[0] = 'P';
  CHECK(contains(decode_error(not_zstd, 200000), "is not a zstd stream (it starts with bytes 50 b5 2f fd"));
  CHECK(contains(decode_error({}, 10), "the item is empty"));
  std::vector<uint8_t> trailing = good;
  trailing.insert(trailing.end(), {1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(contains(decode_error(trailing, 200000), "corrupt zstd stream"));

  // A frame whose window (here 2^30) is far beyond what an item of 1 kB can need is refused before
  // the decoder allocates it.
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 30);
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  const std::vector<uint8_t> data = pattern(1000);
  std::vector<uint8_t> wide(ZSTD_compressBound(data.size()) + 64);
  ZSTD_outBuffer o{wide.data(), wide.size(), 0};
  // Fed in two calls, so that the compressor does not know the size and keeps the window asked for.
  ZSTD_inBuffer i{data.data(), 10, 0};
  ZSTD_compressStream2(c, &o, &i, ZSTD_e_continue);
  ZSTD_inBuffer rest{data.data() + 10, data.size() - 10, 0};
  while (ZSTD_compressStream2(c, &o, &rest, ZSTD_e_end) != 0) {
  }
  ZSTD_freeCCtx(c);
  wide.resize(o.pos);
  CHECK(contains(decode_error(wide, 1000), "a zstd frame declares a window larger than the 2^23 bytes"));
}
