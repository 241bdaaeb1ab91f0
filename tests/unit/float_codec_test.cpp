// Holds lib/core/float_codec.h to independent goldens, bit for bit: the tables in testdata/codecs/
// (made from PyTorch 2.11 and ml_dtypes by gen_codec_goldens.py; its README.md says which library each
// table follows) and hand-derived worked examples below.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "catch.h"
#include "core/float_codec.h"

using namespace fpg;

namespace {

template <class T>
std::vector<T> load(const std::string& name) {
  const std::string path = std::string(FPG_TESTDATA_DIR) + "/codecs/" + name;
  INFO("golden file " << path << " (regenerate with testdata/codecs/gen_codec_goldens.py)");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  REQUIRE(f.good());
  const auto bytes = static_cast<size_t>(f.tellg());
  REQUIRE(bytes % sizeof(T) == 0);
  std::vector<T> v(bytes / sizeof(T));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  REQUIRE(f.good());
  return v;
}

std::string hex(uint64_t v, int digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llX", digits, static_cast<unsigned long long>(v));
  return buf;
}

// got(i) against want[i] for every i; on failure reports the count and the first mismatches with the
// input bits (in[i]), expected and actual code.
template <class Want, class Got>
void expect_table(const std::string& what, const std::vector<uint32_t>& in, const std::vector<Want>& want,
                  Got got) {
  REQUIRE(in.size() == want.size());
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < in.size(); ++i) {
    const Want g = got(in[i]);
    if (g == want[i]) continue;
    if (++bad <= 8)
      first += "\n  in " + hex(in[i], 8) + ": expected " + hex(want[i], 2 * sizeof(Want)) + ", got " +
               hex(g, 2 * sizeof(Want));
  }
  INFO(what << ": " << bad << " of " << in.size() << " differ" << first);
  CHECK(bad == 0);
}

// Every encoder, by the name used in the golden file names.
void check_encoders(const std::string& set, const std::vector<std::string>& names) {
  const auto in = load<uint32_t>(set + ".f32.bin");
  for (const auto& n : names) {
    const std::string file = set + "." + n;
    const auto x = [](uint32_t u) { return bits_float(u); };
    if (n == "bf16")
      expect_table(file, in, load<uint16_t>(file + ".u16.bin"), [&](uint32_t u) { return bf16_from_float(x(u)); });
    else if (n == "bf16_sat")
      expect_table(file, in, load<uint16_t>(file + ".u16.bin"),
                   [&](uint32_t u) { return bf16_from_float(x(u), Overflow::saturate); });
    else if (n == "fp16")
      expect_table(file, in, load<uint16_t>(file + ".u16.bin"), [&](uint32_t u) { return fp16_from_float(x(u)); });
    else if (n == "fp16_sat")
      expect_table(file, in, load<uint16_t>(file + ".u16.bin"),
                   [&](uint32_t u) { return fp16_from_float(x(u), Overflow::saturate); });
    else if (n == "e4m3_sat")
      expect_table(file, in, load<uint8_t>(file + ".u8.bin"),
                   [&](uint32_t u) { return e4m3_from_float(x(u), Overflow::saturate); });
    else if (n == "e4m3_nonsat")
      expect_table(file, in, load<uint8_t>(file + ".u8.bin"),
                   [&](uint32_t u) { return e4m3_from_float(x(u), Overflow::nonsaturating); });
    else if (n == "e5m2_sat")
      expect_table(file, in, load<uint8_t>(file + ".u8.bin"),
                   [&](uint32_t u) { return e5m2_from_float(x(u), Overflow::saturate); });
    else if (n == "e5m2_nonsat")
      expect_table(file, in, load<uint8_t>(file + ".u8.bin"),
                   [&](uint32_t u) { return e5m2_from_float(x(u), Overflow::nonsaturating); });
    else if (n == "e8m0")
      expect_table(file, in, load<uint8_t>(file + ".u8.bin"), [&](uint32_t u) { return e8m0_from_float(x(u)); });
    else
      FAIL("no encoder for " << n);
  }
}

std::vector<uint32_t> iota_codes(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

float f(uint32_t u) { return bits_float(u); }

}  // namespace

// ---- golden tables --------------------------------------------------------------------------------

TEST_CASE("codec: encoders match the dense fp32 sample goldens", "[codec]") {
  check_encoders("fp32_sample", {"bf16", "bf16_sat", "fp16", "fp16_sat", "e4m3_sat", "e4m3_nonsat", "e5m2_sat",
                                 "e5m2_nonsat", "e8m0"});
}

TEST_CASE("codec: encoders match the goldens for every bf16 and fp16 input", "[codec]") {
  check_encoders("bf16_all", {"fp16", "fp16_sat", "e4m3_sat", "e4m3_nonsat", "e5m2_sat", "e5m2_nonsat", "e8m0"});
  check_encoders("fp16_all", {"bf16", "e4m3_sat", "e4m3_nonsat", "e5m2_sat", "e5m2_nonsat", "e8m0"});
}

TEST_CASE("codec: decoders match the goldens for every code", "[codec]") {
  const auto c8 = iota_codes(256), c16 = iota_codes(65536);
  const auto dec = [](auto fn) { return [fn](uint32_t c) { return float_bits(fn(c)); }; };
  expect_table("e4m3_all", c8, load<uint32_t>("e4m3_all.f32.bin"),
               dec([](uint32_t c) { return float_from_e4m3(static_cast<uint8_t>(c)); }));
  expect_table("e5m2_all", c8, load<uint32_t>("e5m2_all.f32.bin"),
               dec([](uint32_t c) { return float_from_e5m2(static_cast<uint8_t>(c)); }));
  expect_table("e8m0_all", c8, load<uint32_t>("e8m0_all.f32.bin"),
               dec([](uint32_t c) { return float_from_e8m0(static_cast<uint8_t>(c)); }));
  expect_table("bf16_all", c16, load<uint32_t>("bf16_all.f32.bin"),
               dec([](uint32_t c) { return float_from_bf16(static_cast<uint16_t>(c)); }));
  expect_table("fp16_all", c16, load<uint32_t>("fp16_all.f32.bin"),
               dec([](uint32_t c) { return float_from_fp16(static_cast<uint16_t>(c)); }));
}

TEST_CASE("codec: every non-NaN code survives decode then encode", "[codec]") {
  size_t bad = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto b = static_cast<uint16_t>(c);
    if ((c & 0x7FFFu) < 0x7F80u) bad += bf16_from_float(float_from_bf16(b), Overflow::saturate) != b;
    if ((c & 0x7FFFu) <= 0x7F80u) bad += bf16_from_float(float_from_bf16(b)) != b;
    if ((c & 0x7FFFu) < 0x7C00u) bad += fp16_from_float(float_from_fp16(b), Overflow::saturate) != b;
    if ((c & 0x7FFFu) <= 0x7C00u) bad += fp16_from_float(float_from_fp16(b)) != b;
  }
  for (uint32_t c = 0; c < 256; ++c) {
    const auto b = static_cast<uint8_t>(c);
    if ((c & 0x7Fu) != 0x7Fu) {
      bad += e4m3_from_float(float_from_e4m3(b), Overflow::saturate) != b;
      bad += e4m3_from_float(float_from_e4m3(b), Overflow::nonsaturating) != b;
    }
    if ((c & 0x7Fu) <= 0x7Bu) bad += e5m2_from_float(float_from_e5m2(b), Overflow::saturate) != b;
    if ((c & 0x7Fu) <= 0x7Cu) bad += e5m2_from_float(float_from_e5m2(b), Overflow::nonsaturating) != b;
    bad += e8m0_from_float(float_from_e8m0(b)) != b;  // NaN 0xFF included
    bad += e8m0_ceil_from_float(float_from_e8m0(b)) != b;
  }
  CHECK(bad == 0);
}

// ---- fp32 -> FP8 worked examples -------------------------------------------------------------------

TEST_CASE("codec: fp32 -> FP8 worked examples", "[codec]") {
  const auto sat = Overflow::saturate, nosat = Overflow::nonsaturating;
  const float above464 = f(float_bits(464.0f) + 1);  // 464.00003
  // x | E4M3 | E5M2
  CHECK(e4m3_from_float(448.0f) == 0x7E);
  CHECK(e5m2_from_float(448.0f) == 0x5F);
  CHECK(e4m3_from_float(464.0f, nosat) == 0x7E);  // tie -> even (mantissa 110)
  CHECK(e4m3_from_float(464.0f, sat) == 0x7E);
  CHECK(e5m2_from_float(464.0f) == 0x5F);
  CHECK(e4m3_from_float(above464, nosat) == 0x7F);  // just past the tie
  CHECK(e4m3_from_float(above464, sat) == 0x7E);
  CHECK(e5m2_from_float(above464) == 0x5F);
  CHECK(e4m3_from_float(480.0f, nosat) == 0x7F);
  CHECK(e4m3_from_float(480.0f, sat) == 0x7E);
  CHECK(e5m2_from_float(480.0f) == 0x60);  // tie 480 -> 512, even
  CHECK(e4m3_from_float(1.0f) == 0x38);
  CHECK(e5m2_from_float(1.0f) == 0x3C);
  CHECK(e4m3_from_float(1.0625f + 0x1p-20f) == 0x39);  // above the midpoint -> 1.125
  CHECK(e4m3_from_float(0x1p-10f) == 0x00);            // tie between 0 and 2^-9 -> even 0
  CHECK(e5m2_from_float(0x1p-10f) == 0x14);
  CHECK(e4m3_from_float(1.5f * 0x1p-10f) == 0x01);  // 0.75 units -> 1
  CHECK(e5m2_from_float(1.5f * 0x1p-10f) == 0x16);
  CHECK(e4m3_from_float(2.5f * 0x1p-9f) == 0x02);  // tie 2/3 units -> 2
  CHECK(e5m2_from_float(2.5f * 0x1p-9f) == 0x1D);
  CHECK(e4m3_from_float(-0.0f) == 0x80);  // sign kept
  CHECK(e5m2_from_float(-0.0f) == 0x80);
  CHECK(e4m3_from_float(61440.0f, nosat) == 0x7F);
  CHECK(e4m3_from_float(61440.0f, sat) == 0x7E);
  CHECK(e5m2_from_float(61440.0f, nosat) == 0x7C);  // the tie rounds to the even code: inf
  CHECK(e5m2_from_float(61440.0f, sat) == 0x7B);
  // Double rounding: via bf16 the same value is a tie and rounds to even 0x38.
  CHECK(bf16_from_float(1.0625f + 0x1p-20f) == 0x3F88);
  CHECK(e4m3_from_float(float_from_bf16(bf16_from_float(1.0625f + 0x1p-20f))) == 0x38);
  // inf and NaN under each policy.
  const float inf = std::numeric_limits<float>::infinity(), nan = f(0xFFC00000u);
  CHECK(e4m3_from_float(-inf, nosat) == 0xFF);
  CHECK(e4m3_from_float(-inf, sat) == 0xFE);
  CHECK(e5m2_from_float(-inf, nosat) == 0xFC);
  CHECK(e5m2_from_float(-inf, sat) == 0xFB);
  CHECK(e4m3_from_float(nan, nosat) == 0xFF);  // torch <= 2.11 keeps the sign
  CHECK(e4m3_from_float(nan, sat) == 0x7F);    // satfinite drops it
  CHECK(e5m2_from_float(nan, nosat) == 0xFF);
  CHECK(e5m2_from_float(nan, sat) == 0x7F);
}

// ---- the bf16 rule -------------------------------------------------------------------------------

TEST_CASE("codec: bf16 rounding rule", "[codec]") {
  // (u + 0x7FFF + lsb) >> 16 for non-NaN u, against the sample's inputs.
  const auto in = load<uint32_t>("fp32_sample.f32.bin");
  size_t bad = 0, checked = 0;
  for (uint32_t u : in) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) continue;
    ++checked;
    bad += bf16_from_float(f(u)) != static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  CHECK(checked > 200000);
  CHECK(bad == 0);
  CHECK(bf16_from_float(f(0x3F808000u)) == 0x3F80);  // tie, even stays
  CHECK(bf16_from_float(f(0x3F818000u)) == 0x3F82);  // tie, odd rounds up
  CHECK(bf16_from_float(f(0x3F808001u)) == 0x3F81);  // just above the tie
  CHECK(bf16_from_float(f(0x7F7FFFFFu)) == 0x7F80);  // overflow rounds to inf
  CHECK(bf16_from_float(f(0xFF7FFFFFu), Overflow::saturate) == 0xFF7F);
  CHECK(bf16_from_float(f(0x00018000u)) == 0x0002);  // subnormals kept (tie, odd -> up)
  CHECK(bf16_from_float(f(0x80008000u)) == 0x8000);  // tie to even zero, sign kept
  CHECK(bf16_from_float(f(0xFFC00001u)) == 0x7FC0);  // NaN: c10 scalar path, sign dropped
  CHECK(bf16_from_float(f(0x7F800001u)) == 0x7FC0);  // a signalling NaN stays a NaN
}

// ---- E8M0 -----------------------------------------------------------------------------------------

TEST_CASE("codec: E8M0 decode and PyTorch .to() rule", "[codec]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(float_bits(float_from_e8m0(0x00)) == 0x00400000u);  // 2^-127, an fp32 subnormal
  CHECK(float_from_e8m0(0x7F) == 1.0f);
  CHECK(float_from_e8m0(0xFE) == 0x1p127f);
  CHECK(float_from_e8m0(0xFF) != float_from_e8m0(0xFF));  // NaN
  // The torch row of the table: 0.0 | negative | 1.25 | 1.5 | 3.0 | inf/NaN | overflow.
  CHECK(e8m0_from_float(0.0f) == 0x00);
  CHECK(e8m0_from_float(-2.0f) == 0x80);  // sign ignored
  CHECK(e8m0_from_float(1.25f) == 0x7F);
  CHECK(e8m0_from_float(1.5f) == 0x80);  // a tie on the linear mantissa rounds up
  CHECK(e8m0_from_float(3.0f) == 0x81);
  CHECK(e8m0_from_float(inf) == 0xFF);
  CHECK(e8m0_from_float(f(0x7FC00000u)) == 0xFF);
  CHECK(e8m0_from_float(1.5f * 0x1p127f) == 0xFF);  // e=254 rounding up
  CHECK(e8m0_from_float(f(0x7F3FFFFFu)) == 0xFE);
  CHECK(e8m0_from_float(f(0x00400000u)) == 0x00);  // 2^-127 exactly
  CHECK(e8m0_from_float(f(0x00400001u)) == 0x01);
  CHECK(e8m0_from_float(f(0x003FFFFFu)) == 0x00);
}

TEST_CASE("codec: E8M0 round-up rule (TE / cuBLAS RCEIL), hand-derived cases", "[codec]") {
  const float inf = std::numeric_limits<float>::infinity();
  // TE float_to_e8m0 (util/ptx_arch_spec.cuh): zero, the table's values, inf and NaN.
  CHECK(e8m0_ceil_from_float(0.0f) == 0x00);
  CHECK(e8m0_ceil_from_float(-0.0f) == 0x00);
  CHECK(e8m0_ceil_from_float(1.25f) == 0x80);
  CHECK(e8m0_ceil_from_float(1.5f) == 0x80);
  CHECK(e8m0_ceil_from_float(3.0f) == 0x81);
  CHECK(e8m0_ceil_from_float(inf) == 0xFE);
  CHECK(e8m0_ceil_from_float(-inf) == 0xFE);
  CHECK(e8m0_ceil_from_float(f(0x7FC00000u)) == 0xFF);
  CHECK(e8m0_ceil_from_float(f(0xFF800001u)) == 0xFF);
  // Powers of two are exact; anything above rounds up; saturates at 0xFE (2^127).
  CHECK(e8m0_ceil_from_float(1.0f) == 0x7F);
  CHECK(e8m0_ceil_from_float(f(0x3F800001u)) == 0x80);
  CHECK(e8m0_ceil_from_float(0x1p127f) == 0xFE);
  CHECK(e8m0_ceil_from_float(f(0x7F000001u)) == 0xFE);
  CHECK(e8m0_ceil_from_float(std::numeric_limits<float>::max()) == 0xFE);
  // fp32 subnormals: <= 2^-127 -> 0x00 (2^-127), above -> 0x01 (2^-126).
  CHECK(e8m0_ceil_from_float(f(0x00000001u)) == 0x00);
  CHECK(e8m0_ceil_from_float(f(0x003FFFFFu)) == 0x00);
  CHECK(e8m0_ceil_from_float(f(0x00400000u)) == 0x00);
  CHECK(e8m0_ceil_from_float(f(0x00400001u)) == 0x01);
  CHECK(e8m0_ceil_from_float(f(0x007FFFFFu)) == 0x01);
  CHECK(e8m0_ceil_from_float(f(0x00800000u)) == 0x01);  // 2^-126
  CHECK(e8m0_ceil_from_float(f(0x00800001u)) == 0x02);

  // MXFP8 RCEIL: e = ceil(amax * fp32(1/448)). 448*fp32(1/448) is exactly 1, so amax = 448*2^k
  // gives 127+k; the next float up gives 128+k.
  const float rcp = 1.0f / 448.0f;
  REQUIRE(float_bits(rcp) == 0x3B124925u);
  for (int k = -126; k <= 119; ++k) {  // 448*2^120 overflows fp32
    const float amax = 448.0f * std::ldexp(1.0f, k);
    CAPTURE(k);
    CHECK(amax * rcp == std::ldexp(1.0f, k));
    CHECK(int(e8m0_ceil_from_float(amax * rcp)) == 127 + k);
    CHECK(int(e8m0_ceil_from_float(f(float_bits(amax) + 1) * rcp)) == 128 + k);
  }
  CHECK(e8m0_ceil_from_float(448.0f * 0x1p-130f * rcp) == 0x00);  // 2^-130: fp32 subnormal, under 2^-127
  CHECK(e8m0_ceil_from_float(1.0f * rcp) == 119);                 // amax 1 -> 2^-8
  CHECK(e8m0_ceil_from_float(480.0f * rcp) == 128);               // amax 480 -> 2, 240 -> 0x77
  CHECK(e4m3_from_float(480.0f / 2.0f) == 0x77);
  CHECK(e8m0_ceil_from_float(1e-40f * rcp) == 0x00);
}

TEST_CASE("codec: E8M0 round-up is the smallest power of two >= |x| (sample and all bf16/fp16)", "[codec]") {
  // decoded[e] for e in [0, 254], increasing: 2^-127 .. 2^127.
  std::vector<float> pow2(255);
  for (int e = 0; e < 255; ++e) pow2[e] = float_from_e8m0(static_cast<uint8_t>(e));
  for (const char* set : {"fp32_sample.f32.bin", "bf16_all.f32.bin", "fp16_all.f32.bin"}) {
    const auto in = load<uint32_t>(set);
    size_t bad = 0;
    std::string first;
    for (uint32_t u : in) {
      const uint32_t a = u & 0x7FFFFFFFu;
      uint8_t want;
      if (a > 0x7F800000u) {
        want = 0xFF;
      } else {
        const auto it = std::lower_bound(pow2.begin(), pow2.end(), f(a));
        want = static_cast<uint8_t>(it == pow2.end() ? 0xFE : it - pow2.begin());  // saturate; inf too
      }
      const uint8_t got = e8m0_ceil_from_float(f(u));
      if (got != want && ++bad <= 8) first += "\n  in " + hex(u, 8) + ": expected " + hex(want, 2) + ", got " + hex(got, 2);
    }
    INFO(set << ": " << bad << " differ" << first);
    CHECK(bad == 0);
  }
}
