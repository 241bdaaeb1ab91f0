// The AVX2 kernels (lib/fp8/cast_avx2.h, the fused MX pass) against the portable loops they stand
// beside: every recipe, format, MX rule and input type gives the same bytes, scales and amaxes with
// the kernels on and off. Values are chosen to hit every path: NaN of both signs, +-inf, +-0, fp32
// subnormals, FP8 subnormal and overflow ranges, whole NaN / inf / zero MX blocks, and sizes with
// tails shorter than a 32-element group. On a CPU without AVX2 both runs take the portable loops.
// (All 2^32 fp32 inputs of the cast kernel: the [exhaustive] test in fp8_format_test.cpp.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "catch.h"
#include "core/float_codec.h"
#include "fp8/cast_loops.h"
#include "fp8/quantize.h"
#include "fp8/simd.h"

using namespace fpg;
using namespace fpg::fp8;

namespace {

std::vector<float> nasty_values(uint64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t r = g();
    switch (r % 8) {
      case 0: v[i] = bits_float(static_cast<uint32_t>(g())); break;  // any pattern: NaNs, infs, subnormals
      case 1: v[i] = bits_float(static_cast<uint32_t>(g()) & 0x807FFFFFu); break;                    // fp32 subnormal
      default: v[i] = static_cast<float>(std::ldexp((r >> 8) % 2 ? -1.0 : 1.0, static_cast<int>((r >> 16) % 60) - 40) *
                                         (1.0 + static_cast<double>((r >> 24) % 4096) / 4096.0));
    }
  }
  // Whole MX blocks of one kind (rows of K = 96 hold 3 blocks).
  for (uint64_t i = 0; i < 32 && 32 + i < n; ++i) v[32 + i] = bits_float(0x7FC00000u | (i % 2 ? 0x80000000u : 0u));
  for (uint64_t i = 0; i < 32 && 64 + i < n; ++i) v[64 + i] = i % 2 ? -INFINITY : INFINITY;
  for (uint64_t i = 0; i < 32 && 96 + i < n; ++i) v[96 + i] = i % 2 ? -0.0f : 0.0f;
  return v;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = static_cast<uint16_t>(float_bits(v[i]) >> 16);  // any bf16 pattern
  return b;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_bits(v[i]);
  return b;
}

QuantizedTensor run(const Recipe& r, Input in, const std::vector<uint64_t>& shape, const void* x, bool simd) {
  set_avx2_enabled(simd);
  QuantizedTensor q = quantize_tensor(r, in, shape, x, "t");
  set_avx2_enabled(true);
  return q;
}

}  // namespace

TEST_CASE("fp8 AVX2 kernels equal the portable loops", "[fp8][simd]") {
  const std::vector<std::vector<uint64_t>> shapes = {{256, 96}, {37, 160}, {5, 1024}, {1, 7}, {3, 33}};
  for (uint64_t seed = 1; seed <= 3; ++seed)
    for (const auto& shape : shapes) {
      const std::vector<float> f = nasty_values(shape[0] * shape[1], seed);
      const std::vector<uint16_t> b = to_bf16_bits(f);
      for (Format fmt : {Format::e4m3, Format::e5m2}) {
        std::vector<Recipe> recipes = {Recipe::tensorwise(fmt), Recipe::tensorwise(fmt, true),
                                       Recipe::blockwise_1x128(fmt), Recipe::blockwise_128x128(fmt, false)};
        if (shape[1] % 32 == 0)
          for (MxRule rule : {MxRule::rceil, MxRule::floor}) recipes.push_back(Recipe::mxfp8(fmt, rule));
        for (const Recipe& r : recipes)
          for (Input in : {Input::f32, Input::bf16, Input::f32_as_bf16}) {
            const void* x = in == Input::bf16 ? static_cast<const void*>(b.data()) : f.data();
            const QuantizedTensor fast = run(r, in, shape, x, true);
            const QuantizedTensor ref = run(r, in, shape, x, false);
            INFO("shape " << shape[0] << "x" << shape[1] << " seed " << seed << " scaling "
                          << static_cast<int>(r.scaling) << " format " << static_cast<int>(fmt) << " input "
                          << static_cast<int>(in) << " rule " << static_cast<int>(r.mx_rule));
            CHECK(fast.data == ref.data);
            CHECK(fast.scale_inv == ref.scale_inv);
            CHECK(bits_of(fast.amax.row) == bits_of(ref.amax.row));
          }
      }
    }
}

// Outputs of 1 MiB and more are written with streaming stores after a portable head up to the first
// 32-byte boundary: every misalignment of the output, both formats and input types, against the
// portable loop.
TEST_CASE("fp8 AVX2 streamed cast of a large run equals the portable loop", "[fp8][simd]") {
  const uint64_t n = (uint64_t{1} << 20) + 77;
  const std::vector<float> f = nasty_values(n, 7);
  const std::vector<uint16_t> b = to_bf16_bits(f);
  std::vector<uint8_t> fast(n + 64), ref(n + 64);
  for (size_t misalign : {size_t{0}, size_t{1}, size_t{16}, size_t{31}}) {
    uint8_t* fo = fast.data() + (32 - reinterpret_cast<uintptr_t>(fast.data()) % 32) % 32 + misalign;
    uint8_t* ro = ref.data() + (32 - reinterpret_cast<uintptr_t>(ref.data()) % 32) % 32 + misalign;
    for (int fmt = 0; fmt < 2; ++fmt) {
      set_avx2_enabled(true);
      if (fmt == 0) cast_run<Format::e4m3, SrcF32>(f.data(), n, 3.5f, fo);
      else cast_run<Format::e5m2, SrcBf16>(b.data(), n, 0.75f, fo);
      set_avx2_enabled(false);
      if (fmt == 0) cast_run<Format::e4m3, SrcF32>(f.data(), n, 3.5f, ro);
      else cast_run<Format::e5m2, SrcBf16>(b.data(), n, 0.75f, ro);
      set_avx2_enabled(true);
      INFO("misalign " << misalign << " format " << fmt);
      CHECK(std::equal(fo, fo + n, ro));
    }
  }
}
