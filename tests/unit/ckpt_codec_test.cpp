// Chunk encoding: HDF5-compatible shuffle, zstd round trips, edge chunks, raw fallback, parsing of
// --compress.
#include <random>

#include "catch.h"
#include "ckpt/checksum.h"
#include "ckpt/chunk_codec.h"
#include "ckpt/index.h"
#include "core/error.h"

using namespace fpg;
using namespace fpg::ckpt;

TEST_CASE("ckpt codec: --compress parsing", "[ckpt]") {
  CHECK(!parse_compression("none").zstd);
  CHECK(parse_compression("zstd").level == 1);
  CHECK(parse_compression("zstd:7").level == 7);
  CHECK(parse_compression("zstd:3+shuffle").shuffle);
  CHECK(to_string(parse_compression("zstd:3+shuffle")) == "zstd:3+shuffle");
  CHECK_THROWS_AS(parse_compression("zstd:0"), UsageError);
  CHECK_THROWS_AS(parse_compression("zstd:23"), UsageError);
  CHECK_THROWS_AS(parse_compression("gzip"), UsageError);
  CHECK_THROWS_AS(parse_compression("none+shuffle"), UsageError);
}

TEST_CASE("ckpt codec: shuffle matches HDF5's layout and inverts", "[ckpt]") {
  const uint8_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t out[8], back[8];
  shuffle_bytes(in, out, 8, 4);
  const uint8_t want[8] = {1, 5, 2, 6, 3, 7, 4, 8};
  for (int i = 0; i < 8; ++i) CHECK(out[i] == want[i]);
  unshuffle_bytes(out, back, 8, 4);
  for (int i = 0; i < 8; ++i) CHECK(back[i] == in[i]);
}

TEST_CASE("ckpt codec: round trips for every encoding, edge chunks included", "[ckpt]") {
  std::mt19937 rng(3);
  std::vector<float> data(1000);
  for (auto& x : data) x = static_cast<float>(rng() % 64) * 0.25f;  // compressible
  for (const char* spec : {"none", "zstd:1", "zstd:5+shuffle"}) {
    const Compression c = parse_compression(spec);
    for (uint64_t len : {uint64_t{256}, uint64_t{100}}) {
      CodecScratch s, d;
      const EncodedChunk e = encode_chunk(data.data(), len, 256, 4, c, s);
      if (!c.zstd) CHECK(e.size == 1024);
      if (c.zstd) CHECK((e.flags & kFilterZstd) != 0);
      std::vector<float> back(len);
      const std::vector<uint8_t> stored(e.data, e.data + e.size);
      CHECK(decode_chunk(stored.data(), stored.size(), e.flags, len, 256, 4, back.data(), d).empty());
      CHECK(std::equal(back.begin(), back.end(), data.begin()));
    }
  }
}

TEST_CASE("ckpt codec: incompressible chunks are stored raw; corrupt frames are reported", "[ckpt]") {
  std::mt19937 rng(5);
  std::vector<uint32_t> noise(512);
  for (auto& x : noise) x = rng();
  CodecScratch s;
  const EncodedChunk e = encode_chunk(noise.data(), 512, 512, 4, parse_compression("zstd:1"), s);
  CHECK(e.flags == 0);
  CHECK(e.size == 2048);
  std::vector<uint8_t> junk(64, 0xAB);
  std::vector<uint32_t> out(512);
  CHECK(!decode_chunk(junk.data(), junk.size(), kFilterZstd, 512, 512, 4, out.data(), s).empty());
  CHECK(checksum("abc", 3) != checksum("abd", 3));
}
