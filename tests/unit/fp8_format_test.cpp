// The branch-free satfinite encoders of lib/fp8/format.h against the reference encoders of
// lib/core/float_codec.h: a dense sample in the default run, all 2^32 inputs in [exhaustive].
#include <cstdint>
#include <random>
#include <vector>

#include "catch.h"
#include "core/float_codec.h"
#include "fp8/format.h"
#include "fp8/tensorwise.h"

using namespace fpg;
using namespace fpg::fp8;

namespace {

// Every exponent and sign; per exponent a stride over the mantissa plus every (k << j) +- 1 for
// j = 0..23, which puts a sample on and next to every rounding boundary of every target (normal and
// subnormal E4M3/E5M2), and the specials (+-0, +-inf, NaNs) fall out of exponents 0 and 255.
std::vector<uint32_t> dense_sample() {
  std::vector<uint32_t> v;
  for (uint32_t s = 0; s < 2; ++s)
    for (uint32_t e = 0; e < 256; ++e) {
      const uint32_t base = (s << 31) | (e << 23);
      for (uint32_t m = 0; m < (1u << 23); m += 2039) v.push_back(base | m);
      for (uint32_t j = 0; j < 24; ++j)
        for (uint32_t k = 0; k < 16; ++k)
          for (int d = -1; d <= 1; ++d) {
            const uint32_t m = ((k << j) + static_cast<uint32_t>(d)) & 0x7FFFFFu;
            v.push_back(base | m);
          }
      v.push_back(base | 0x7FFFFFu);
    }
  std::mt19937 rng(12345);
  for (int i = 0; i < 1000000; ++i) v.push_back(static_cast<uint32_t>(rng()));
  return v;
}

}  // namespace

TEST_CASE("fp8 fast encoders equal the reference on a dense sample", "[fp8][format]") {
  const std::vector<uint32_t> sample = dense_sample();
  uint64_t bad4 = 0, bad5 = 0;
  for (uint32_t u : sample) {
    const float x = bits_float(u);
    bad4 += e4m3_satfinite(x) != e4m3_from_float(x, Overflow::saturate);
    bad5 += e5m2_satfinite(x) != e5m2_from_float(x, Overflow::saturate);
  }
  CHECK(bad4 == 0);
  CHECK(bad5 == 0);

  // The vectorised loop (and its AVX2 clone where the CPU has it) computes the same bytes.
  std::vector<float> xs(sample.size());
  for (size_t i = 0; i < sample.size(); ++i) xs[i] = bits_float(sample[i]);
  std::vector<uint8_t> out(xs.size());
  for (Format f : {Format::e4m3, Format::e5m2}) {
    cast_contiguous(f, Input::f32, xs.data(), xs.size(), 1.0f, out.data());
    uint64_t bad = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      bad += out[i] != (f == Format::e4m3 ? e4m3_from_float(xs[i]) : e5m2_from_float(xs[i]));
    CHECK(bad == 0);
  }
}

TEST_CASE("fp8 fast encoders on every bf16 input", "[fp8][format]") {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint8_t> out(all.size());
  for (Format f : {Format::e4m3, Format::e5m2})
    for (float scale : {1.0f, 224.0f, 0.0078125f}) {
      cast_contiguous(f, Input::bf16, all.data(), all.size(), scale, out.data());
      uint64_t bad = 0;
      for (uint32_t i = 0; i < 65536; ++i) {
        const float x = float_from_bf16(static_cast<uint16_t>(i)) * scale;
        bad += out[i] != (f == Format::e4m3 ? e4m3_from_float(x) : e5m2_from_float(x));
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("fp8 fast encoders: fp32 -> FP8 worked examples", "[fp8][format]") {
  CHECK(e4m3_satfinite(448.0f) == 0x7E);
  CHECK(e4m3_satfinite(464.0f) == 0x7E);
  CHECK(e4m3_satfinite(480.0f) == 0x7E);
  CHECK(e4m3_satfinite(1.0f) == 0x38);
  CHECK(e4m3_satfinite(1.0625f + 0x1p-20f) == 0x39);
  CHECK(e4m3_satfinite(0x1p-10f) == 0x00);
  CHECK(e4m3_satfinite(1.5f * 0x1p-10f) == 0x01);
  CHECK(e4m3_satfinite(2.5f * 0x1p-9f) == 0x02);
  CHECK(e4m3_satfinite(-0.0f) == 0x80);
  CHECK(e4m3_satfinite(bits_float(0x7F800000u)) == 0x7E);
  CHECK(e4m3_satfinite(bits_float(0xFF800000u)) == 0xFE);
  CHECK(e4m3_satfinite(bits_float(0xFFC00000u)) == 0x7F);
  CHECK(e5m2_satfinite(448.0f) == 0x5F);
  CHECK(e5m2_satfinite(480.0f) == 0x60);
  CHECK(e5m2_satfinite(61440.0f) == 0x7B);
  CHECK(e5m2_satfinite(0x1p-10f) == 0x14);
  CHECK(e5m2_satfinite(-0.0f) == 0x80);
  CHECK(e5m2_satfinite(bits_float(0xFF800000u)) == 0xFB);
  CHECK(float_bits(format_max_rcp(Format::e4m3)) == float_bits(1.0f / 448.0f));
  CHECK(float_bits(format_max_rcp(Format::e5m2)) == float_bits(1.0f / 57344.0f));
}

TEST_CASE("fp8 fast encoders equal the reference on all 2^32 inputs", "[.][exhaustive]") {
  // The scalar encoders, and the cast loop (the AVX2 kernel of cast_avx2.h where the CPU has it),
  // chunk by chunk.
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  std::vector<float> xs(kChunk);
  std::vector<uint8_t> out4(kChunk), out5(kChunk);
  uint64_t bad4 = 0, bad5 = 0, bad_loop4 = 0, bad_loop5 = 0;
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kChunk) {
    for (uint64_t i = 0; i < kChunk; ++i) xs[i] = bits_float(static_cast<uint32_t>(base + i));
    cast_contiguous(Format::e4m3, Input::f32, xs.data(), kChunk, 1.0f, out4.data());
    cast_contiguous(Format::e5m2, Input::f32, xs.data(), kChunk, 1.0f, out5.data());
    for (uint64_t i = 0; i < kChunk; ++i) {
      const float x = xs[i];
      const uint8_t ref4 = e4m3_from_float(x, Overflow::saturate), ref5 = e5m2_from_float(x, Overflow::saturate);
      bad4 += e4m3_satfinite(x) != ref4;
      bad5 += e5m2_satfinite(x) != ref5;
      bad_loop4 += out4[i] != ref4;
      bad_loop5 += out5[i] != ref5;
    }
  }
  CHECK(bad4 == 0);
  CHECK(bad5 == 0);
  CHECK(bad_loop4 == 0);
  CHECK(bad_loop5 == 0);
}
