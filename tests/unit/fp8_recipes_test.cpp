// Hand-worked examples of each recipe (TE Float8CurrentScaling, DelayedScaling, Float8BlockScaling,
// MXFP8Quantizer; OCP MX v1.0 floor) and the documented edge rules of every recipe.
#include <cmath>
#include <cstdint>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "fp8/amax.h"
#include "fp8/blockwise.h"
#include "fp8/delayed.h"
#include "fp8/mx_swizzle.h"
#include "fp8/mxfp8.h"
#include "fp8/quantize.h"
#include "fp8/shard.h"
#include "fp8/tensorwise.h"

using namespace fpg;
using namespace fpg::fp8;

namespace {

float f32(const std::vector<uint8_t>& bytes, size_t i) {
  float x;
  memcpy(&x, bytes.data() + 4 * i, 4);
  return x;
}

}  // namespace

TEST_CASE("fp8 amax ignores NaN and combines by max", "[fp8]") {
  const float nan = bits_float(0x7FC00000u), inf = bits_float(0x7F800000u);
  std::vector<float> v = {nan, -2.0f, 1.5f, -nan, -0.0f};
  CHECK(amax_contiguous(Input::f32, v.data(), v.size()) == 2.0f);
  std::vector<float> all_nan = {nan, nan};
  CHECK(float_bits(amax_contiguous(Input::f32, all_nan.data(), 2)) == 0u);
  std::vector<float> with_inf = {1.0f, -inf, nan};
  CHECK(amax_contiguous(Input::f32, with_inf.data(), 3) == inf);
  std::vector<uint16_t> b = {0xFFC1, 0xC000 /* -2 */, 0x3F80 /* 1 */, 0x7F81};
  CHECK(amax_contiguous(Input::bf16, b.data(), b.size()) == 2.0f);
  // fp32 read as bf16(fp32): the amax of the rounded values; NaN still ignored.
  std::vector<float> r = {1.00390625f /* ties to 1.0 */, -1.01171875f /* rounds to -1.015625 */, nan};
  CHECK(amax_contiguous(Input::f32_as_bf16, r.data(), r.size()) == 1.015625f);
  CHECK(amax_fold(nan, 1.0f) == 1.0f);
  CHECK(amax_fold(1.0f, nan) == 1.0f);
  CHECK(amax_fold(1.0f, -3.0f) == 3.0f);
}

TEST_CASE("fp8 tensorwise: worked example and edge rules", "[fp8]") {
  // amax 2 -> scale 224; 1.3 -> 291.2 -> 288 = 0x79; dequantized 288/224.
  CHECK(tensorwise_scale(2.0f, Format::e4m3, false, 0.0f) == 224.0f);
  std::vector<float> x = {1.3f, -2.0f, 0.5f};
  const QuantizedTensor q = quantize_tensor(Recipe::tensorwise(), Input::f32, {3}, x.data(), "w");
  CHECK(q.data[0] == 0x79);
  CHECK(q.data[1] == 0xFE);  // -448
  CHECK(q.scale_shape.empty());
  CHECK(q.scale_dtype == DType::F32);
  CHECK(f32(q.scale_inv, 0) == 1.0f / 224.0f);
  const std::vector<float> d = dequantize_tensor(Recipe::tensorwise(), {3}, q.data.data(), q.scale_inv.data());
  CHECK(d[0] == 288.0f * (1.0f / 224.0f));

  // amax 0, inf or NaN -> scale 1; an inf scale -> FLT_MAX; pow2 truncates; epsilon.
  const float inf = bits_float(0x7F800000u), nan = bits_float(0x7FC00000u);
  CHECK(tensorwise_scale(0.0f, Format::e4m3, false, 0.0f) == 1.0f);
  CHECK(tensorwise_scale(inf, Format::e4m3, false, 0.0f) == 1.0f);
  CHECK(tensorwise_scale(nan, Format::e4m3, false, 0.0f) == 1.0f);
  CHECK(tensorwise_scale(1e-39f, Format::e4m3, false, 0.0f) == kFloatMax);
  CHECK(tensorwise_scale(1e-39f, Format::e4m3, true, 0.0f) == 0x1p127f);
  CHECK(tensorwise_scale(3.0f, Format::e4m3, true, 0.0f) == 128.0f);  // 149.33 -> 128
  CHECK(tensorwise_scale(0.0f, Format::e4m3, false, 1e-4f) == 448.0f / 1e-4f);
  CHECK(tensorwise_scale(1.0f, Format::e5m2, false, 0.0f) == 57344.0f);

  // A NaN element never sets the amax and encodes as 0x7F; inf sets it (scale 1) and saturates.
  std::vector<float> y = {nan, 2.0f, -1.0f};
  const QuantizedTensor qn = quantize_tensor(Recipe::tensorwise(), Input::f32, {3}, y.data());
  CHECK(qn.amax.row[0] == 2.0f);
  CHECK(qn.scales.scale[0] == 224.0f);
  CHECK(qn.data[0] == 0x7F);
  std::vector<float> z = {inf, 2.0f, -1.0f};
  const QuantizedTensor qi = quantize_tensor(Recipe::tensorwise(), Input::f32, {3}, z.data());
  CHECK(qi.scales.scale[0] == 1.0f);
  CHECK(qi.data[0] == 0x7E);
  CHECK(qi.data[1] == 0x40);  // 2.0

  // All zeros: scale 1, zero bytes.
  std::vector<float> zeros(8, 0.0f);
  const QuantizedTensor qz = quantize_tensor(Recipe::tensorwise(), Input::f32, {2, 4}, zeros.data());
  CHECK(qz.scales.scale[0] == 1.0f);
  CHECK(qz.data == std::vector<uint8_t>(8, 0));
}

TEST_CASE("fp8 delayed scaling: worked example, update order and roll", "[fp8]") {
  DelayedConfig c;
  c.history_len = 2;
  c.algo = AmaxAlgo::max;
  c.margin = 1;
  DelayedState s(c);
  s.amax_history = {3.5f, 2.0f};
  delayed_update(c, s);
  CHECK(s.scale == 64.0f);
  CHECK(s.scale_inv == 1.0f / 64.0f);
  CHECK(s.amax_history == std::vector<float>{0.0f, 3.5f});

  // The next step casts with that scale: 1.0 -> 64 = 0x68.
  std::vector<float> x = {1.0f, 0.5f};
  const Plan p = make_plan(Recipe::delayed(), Input::f32, {2});
  const Scales sc = delayed_scales(s);
  std::vector<uint8_t> out(2);
  cast_fragment(p, sc.view(), 0, 2, x.data(), out.data(), nullptr);
  CHECK(out[0] == 0x68);
  QuantizeOptions opt;
  opt.scale = s.scale;
  CHECK(quantize_tensor(Recipe::delayed(), Input::f32, {2}, x.data(), "w", opt).data == out);
  CHECK_THROWS_AS(quantize_tensor(Recipe::delayed(), Input::f32, {2}, x.data()), UsageError);

  // Roll for L=4: new[0]=0, new[i]=old[i+1], new[L-1]=old[0].
  DelayedConfig c4;
  c4.history_len = 4;
  DelayedState s4(c4);
  s4.amax_history = {1.0f, 2.0f, 3.0f, 4.0f};
  delayed_update(c4, s4);
  CHECK(s4.amax_history == std::vector<float>{0.0f, 3.0f, 4.0f, 1.0f});
  CHECK(s4.scale == 448.0f / 4.0f);

  // most_recent uses history[0]; an amax of 0 or inf keeps the previous scale.
  c4.algo = AmaxAlgo::most_recent;
  s4.amax_history = {7.0f, 100.0f, 100.0f, 100.0f};
  delayed_update(c4, s4);
  CHECK(s4.scale == 64.0f);
  delayed_update(c4, s4);  // history[0] is 0 now
  CHECK(s4.scale == 64.0f);
  delayed_record(s4, bits_float(0x7F800000u));
  delayed_record(s4, bits_float(0x7FC00000u));  // NaN never enters
  CHECK(s4.amax_history[0] == bits_float(0x7F800000u));
  delayed_update(c4, s4);
  CHECK(s4.scale == 64.0f);
  // Tiny amax: inf scale -> FLT_MAX.
  delayed_record(s4, 1e-39f);
  delayed_update(c4, s4);
  CHECK(s4.scale == kFloatMax);

  // Megatron's default L=1: the roll leaves {0}.
  DelayedConfig c1;
  c1.history_len = 1;
  DelayedState s1(c1);
  delayed_record(s1, 2.0f);
  delayed_update(c1, s1);
  CHECK(s1.scale == 224.0f);
  CHECK(s1.amax_history == std::vector<float>{0.0f});
}

TEST_CASE("fp8 blockwise: worked example, shapes, edge rules", "[fp8]") {
  // pow2: amax 0.75 -> 597.33 -> 512, scale_inv 2^-9; 0.7 -> 358.4 -> 352 = 0x7B -> 0.6875.
  CHECK(blockwise_scale(0.75f, Format::e4m3, true, 0.0f, Input::f32) == 512.0f);
  std::vector<float> x(130 * 200, 0.0f);
  x[0] = 0.7f;
  x[1] = -0.75f;
  const QuantizedTensor q = quantize_tensor(Recipe::blockwise_128x128(), Input::f32, {130, 200}, x.data());
  CHECK(q.scale_shape == std::vector<uint64_t>{2, 2});
  CHECK(f32(q.scale_inv, 0) == 0x1p-9f);
  CHECK(q.data[0] == 0x7B);
  const std::vector<float> d = dequantize_tensor(Recipe::blockwise_128x128(), {130, 200}, q.data.data(), q.scale_inv.data());
  CHECK(d[0] == 0.6875f);
  CHECK(f32(q.scale_inv, 1) == 1.0f);  // a zero block: scale 1

  const QuantizedTensor q1 = quantize_tensor(Recipe::blockwise_1x128(), Input::f32, {130, 200}, x.data());
  CHECK(q1.scale_shape == std::vector<uint64_t>{130, 2});
  CHECK(f32(q1.scale_inv, 0) == 0x1p-9f);
  CHECK(f32(q1.scale_inv, 2) == 1.0f);

  // Without pow2 (DeepSeek-V3 style): scale = 448/amax exactly as fp32 division.
  const QuantizedTensor qd = quantize_tensor(Recipe::blockwise_128x128(Format::e4m3, false), Input::f32,
                                             {130, 200}, x.data());
  CHECK(qd.scales.scale[0] == 448.0f / 0.75f);
  CHECK(f32(qd.scale_inv, 0) == 1.0f / (448.0f / 0.75f));

  // Tiny amax: an inf scale becomes the input type's max, then pow2 truncates.
  CHECK(blockwise_scale(1e-39f, Format::e4m3, false, 0.0f, Input::f32) == kFloatMax);
  CHECK(float_bits(blockwise_scale(1e-39f, Format::e4m3, false, 0.0f, Input::bf16)) == 0x7F7F0000u);
  CHECK(blockwise_scale(1e-39f, Format::e4m3, true, 0.0f, Input::bf16) == 0x1p127f);
  CHECK(float_bits(blockwise_scale(1e-39f, Format::e4m3, false, 0.0f, Input::f32_as_bf16)) == 0x7F7F0000u);
}

TEST_CASE("fp8 mxfp8: scale exponents under floor and rceil", "[fp8]") {
  struct Row {
    float amax;
    uint8_t floor_e, rceil_e;
  };
  for (const Row& r : {Row{1.0f, 119, 119}, Row{448.0f, 127, 127}, Row{480.0f, 127, 128}, Row{0.0f, 0, 0},
                       Row{1e-40f, 0, 0}}) {
    CHECK(mx_scale(r.amax, Format::e4m3, MxRule::floor) == r.floor_e);
    CHECK(mx_scale(r.amax, Format::e4m3, MxRule::rceil) == r.rceil_e);
  }
  const float inf = bits_float(0x7F800000u), nan = bits_float(0x7FC00000u);
  CHECK(mx_scale(inf, Format::e4m3, MxRule::rceil) == 0xFE);
  CHECK(mx_scale(inf, Format::e4m3, MxRule::floor) == 0xFF);
  CHECK(mx_scale(nan, Format::e4m3, MxRule::rceil) == 0xFF);
  CHECK(mx_scale(1.0f, Format::e5m2, MxRule::floor) == 112);
  CHECK(mx_scale(57344.0f, Format::e5m2, MxRule::rceil) == 127);
  CHECK(mx_scale(kFloatMax, Format::e4m3, MxRule::floor) == 246);
  // exp2f_rcp edge cases (TE util/ptx_arch_spec.cuh; TE#2408).
  CHECK(float_bits(mx_exp2f_rcp(0)) == 0x7F000000u);  // 2^127
  CHECK(float_bits(mx_exp2f_rcp(127)) == 0x3F800000u);
  CHECK(float_bits(mx_exp2f_rcp(254)) == 0x00400000u);  // 2^-127
  CHECK(std::isnan(mx_exp2f_rcp(255)));
  for (int e = 0; e < 254; ++e) {
    REQUIRE(mx_exp2f_rcp(static_cast<uint8_t>(e)) == std::ldexp(1.0f, 127 - e));
    REQUIRE(mx_exp2f_rcp(static_cast<uint8_t>(e)) * mx_scale_value(static_cast<uint8_t>(e)) == 1.0f);
  }

  // Elements: amax 1 -> 256 = 0x78 (both); 448 -> 0x7E; 480 -> floor saturates 0x7E, rceil 240 = 0x77.
  const auto first_byte = [](float amax, MxRule rule) {
    std::vector<float> x(32, 0.0f);
    x[0] = amax;
    const QuantizedTensor q = quantize_tensor(Recipe::mxfp8(Format::e4m3, rule), Input::f32, {1, 32}, x.data());
    return q.data[0];
  };
  for (MxRule rule : {MxRule::floor, MxRule::rceil}) {
    CHECK(first_byte(1.0f, rule) == 0x78);
    CHECK(first_byte(448.0f, rule) == 0x7E);
  }
  CHECK(first_byte(480.0f, MxRule::floor) == 0x7E);
  CHECK(first_byte(480.0f, MxRule::rceil) == 0x77);

  // Inf in a block: rceil 0xFE flushes finite elements to ~0 and the inf becomes 448; floor gives a
  // NaN block. A NaN element does not set the amax and encodes as 0x7F.
  std::vector<float> x(64, 1.0f);
  x[0] = inf;
  x[32] = nan;
  const QuantizedTensor qr = quantize_tensor(Recipe::mxfp8(Format::e4m3, MxRule::rceil), Input::f32, {2, 32}, x.data());
  CHECK(qr.scale_inv[0] == 0xFE);
  CHECK(qr.data[0] == 0x7E);
  CHECK(qr.data[1] == 0x00);
  CHECK(qr.scale_inv[1] == 119);
  CHECK(qr.data[32] == 0x7F);
  CHECK(qr.data[33] == 0x78);
  const QuantizedTensor qf = quantize_tensor(Recipe::mxfp8(Format::e4m3, MxRule::floor), Input::f32, {2, 32}, x.data());
  CHECK(qf.scale_inv[0] == 0xFF);
  CHECK(qf.data[1] == 0x7F);

  // Zero block: e8m0 0x00, data 0; tiny block likewise.
  std::vector<float> zeros(32, 0.0f);
  zeros[3] = -1e-40f;
  const QuantizedTensor qz = quantize_tensor(Recipe::mxfp8(), Input::f32, {1, 32}, zeros.data());
  CHECK(qz.scale_inv[0] == 0x00);
  CHECK(qz.data[0] == 0x00);
  // A tiny element of a tiny block is not flushed: -1e-40 * 2^127 = -0.017 -> 0x89.
  CHECK(qz.data[3] == e4m3_from_float(-1e-40f * 0x1p127f));
  CHECK(qz.data[3] == 0x89);
}

TEST_CASE("fp8 mxfp8 layouts: compact shapes, columnwise, errors", "[fp8]") {
  std::vector<float> x(64 * 96);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * static_cast<float>(i % 7 + 1);
  const QuantizedTensor q = quantize_tensor(Recipe::mxfp8(), Input::f32, {2, 32, 96}, x.data(), "layer.w");
  CHECK(q.scale_dtype == DType::F8_E8M0);
  CHECK(q.scale_shape == std::vector<uint64_t>{64, 3});
  CHECK(q.scale_inv.size() == 64 * 3);
  const QuantizedTensor qc = quantize_tensor(Recipe::mxfp8(Format::e4m3, MxRule::rceil, true, true), Input::f32,
                                             {64, 96}, x.data());
  CHECK(qc.data == q.data);
  CHECK(qc.scales.e8m0_col.size() == 2 * 96);
  // Columnwise block (band 1, column 5) covers rows 32..63 of column 5.
  float amax = 0.0f;
  for (int r = 32; r < 64; ++r) amax = std::max(amax, std::fabs(x[r * 96 + 5]));
  CHECK(qc.scales.e8m0_col[96 + 5] == mx_scale(amax, Format::e4m3, MxRule::rceil));
  CHECK(qc.data_col[40 * 96 + 5] ==
        e4m3_from_float(x[40 * 96 + 5] * mx_exp2f_rcp(qc.scales.e8m0_col[96 + 5])));

  bool threw = false;
  try {
    quantize_tensor(Recipe::mxfp8(), Input::f32, {4, 100}, x.data(), "model.bad");
  } catch (const UsageError& e) {
    threw = true;
    const std::string what = e.what();
    CHECK(what.find("model.bad") != std::string::npos);
    CHECK(what.find("multiple of 32") != std::string::npos);
    CHECK(what.find("[4, 100]") != std::string::npos);
  }
  CHECK(threw);
  CHECK_THROWS_AS(make_plan(Recipe::mxfp8(Format::e4m3, MxRule::rceil, false, true), Input::f32, {40, 64}),
                  UsageError);
}

TEST_CASE("fp8 mx swizzle: index formula, padding, inverse", "[fp8]") {
  CHECK(mx_swizzled_index(0, 0, 1) == 0);
  CHECK(mx_swizzled_index(0, 1, 1) == 1);
  CHECK(mx_swizzled_index(32, 0, 1) == 4);
  CHECK(mx_swizzled_index(64, 0, 1) == 8);
  CHECK(mx_swizzled_index(96, 0, 1) == 12);
  CHECK(mx_swizzled_index(1, 0, 1) == 16);
  CHECK(mx_swizzled_index(33, 2, 1) == 22);
  CHECK(mx_swizzled_index(127, 3, 1) == 511);
  CHECK(mx_swizzled_index(0, 4, 2) == 512);
  CHECK(mx_swizzled_index(128, 0, 2) == 1024);
  CHECK(mx_swizzled_index(130, 5, 2) == 3 * 512 + 2 * 16 + 1);

  // 130 x 6 compact -> 256 x 8 padded; pads are 0 and the map is a bijection onto the data.
  const uint64_t rows = 130, cols = 6;
  std::vector<uint8_t> compact(rows * cols);
  for (size_t i = 0; i < compact.size(); ++i) compact[i] = static_cast<uint8_t>(1 + i % 250);
  const GridShape ps = mx_swizzled_shape({rows, cols});
  CHECK(ps.rows == 256);
  CHECK(ps.cols == 8);
  std::vector<uint8_t> sw(ps.size(), 0xAA);
  mx_swizzle(compact.data(), rows, cols, sw.data());
  size_t zeros = 0;
  for (uint8_t b : sw) zeros += b == 0;
  CHECK(zeros == ps.size() - compact.size());
  std::vector<uint8_t> back(compact.size());
  mx_unswizzle(sw.data(), rows, cols, back.data());
  CHECK(back == compact);
  // torchao to_blocked: within a tile the 128x4 block is viewed (4, 32, 4), transposed to (32, 4, 4).
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t tile = (r / 128) * 2 + c / 4, rr = r % 128;
      const uint64_t i = rr / 32, j = rr % 32;
      REQUIRE(sw[tile * 512 + j * 16 + i * 4 + c % 4] == compact[r * cols + c]);
    }

  // Columnwise: the [M/32, K] grid is swizzled as its transpose.
  std::vector<float> x(64 * 64, 1.0f);
  x[33 * 64 + 7] = 448.0f;  // band 1, column 7
  const QuantizedTensor q = quantize_tensor(Recipe::mxfp8(Format::e4m3, MxRule::rceil, true, true), Input::f32,
                                            {64, 64}, x.data());
  const Plan& p = q.plan;
  const std::vector<uint8_t> swc = mx_swizzle_columnwise(p, q.scales.e8m0_col.data());
  CHECK(swc.size() == 128 * 4);
  CHECK(swc[mx_swizzled_index(7, 1, 1)] == 127);
  CHECK(swc[mx_swizzled_index(7, 0, 1)] == 119);
  CHECK(swc[mx_swizzled_index(7, 2, 1)] == 0);  // pad
  CHECK(mx_swizzle_rowwise(p, q.scales.e8m0.data()).size() == 128 * 4);
}
