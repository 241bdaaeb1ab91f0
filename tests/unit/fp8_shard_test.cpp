// The shard-aware property: for any split of [0, numel) into fragments, per-fragment partial amax ->
// MAX-combine -> scales -> per-fragment cast gives exactly the bytes of the full-tensor quantization
// (data and scales, rowwise and columnwise), for every recipe, format and input type. Also
// dequantize(quantize(x)) within each format's error bound.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "catch.h"
#include "core/float_codec.h"
#include "core/thread_pool.h"
#include "fp8/batch.h"
#include "fp8/delayed.h"
#include "fp8/quantize.h"
#include "fp8/shard.h"

using namespace fpg;
using namespace fpg::fp8;

namespace {

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  uint64_t below(uint64_t n) { return n ? g() % n : 0; }
  double unit() { return static_cast<double>(g() >> 11) * 0x1p-53; }
};

// Values with a wide dynamic range, whole zero and tiny blocks, and rare inf / NaN.
std::vector<float> make_values(Rng& rng, uint64_t n, bool specials) {
  std::vector<float> v(n);
  const int style = static_cast<int>(rng.below(4));
  for (uint64_t i = 0; i < n; ++i) {
    const double mag = std::ldexp(1.0 + rng.unit(), static_cast<int>(rng.below(40)) - 20);
    float x = static_cast<float>((rng.below(2) ? -1.0 : 1.0) * mag);
    if (style == 1 && (i / 200) % 3 == 0) x = 0.0f;                     // zero stretches
    if (style == 2 && (i / 300) % 2 == 0) x = static_cast<float>(x * 1e-38);  // tiny stretches
    if (specials && rng.below(5000) == 0) x = bits_float(0x7F800000u | (rng.below(2) << 31));
    if (specials && rng.below(5000) == 0) x = bits_float(0x7FC00000u);
    v[i] = x;
  }
  return v;
}

std::vector<Recipe> all_recipes(Format f) {
  std::vector<Recipe> r;
  r.push_back(Recipe::tensorwise(f, false));
  r.push_back(Recipe::tensorwise(f, true));
  Recipe eps = Recipe::tensorwise(f, false);
  eps.amax_epsilon = 1e-3f;
  r.push_back(eps);
  r.push_back(Recipe::delayed(f));
  r.push_back(Recipe::blockwise_1x128(f, true));
  r.push_back(Recipe::blockwise_1x128(f, false));
  r.push_back(Recipe::blockwise_128x128(f, true));
  r.push_back(Recipe::blockwise_128x128(f, false));
  for (MxRule rule : {MxRule::rceil, MxRule::floor}) {
    r.push_back(Recipe::mxfp8(f, rule, true, false));
    r.push_back(Recipe::mxfp8(f, rule, true, true));
    r.push_back(Recipe::mxfp8(f, rule, false, true));
  }
  return r;
}

// A shape the recipe takes: MX rowwise K % 32 == 0, columnwise M % 32 == 0; others anything,
// including 1-D tensors and sizes off the 128 grid.
std::vector<uint64_t> make_shape(Rng& rng, const Recipe& r) {
  if (r.scaling == Scaling::mxfp8) {
    const uint64_t K = r.mx_rowwise ? 32 * (1 + rng.below(8)) : 1 + rng.below(200);
    const uint64_t M = r.mx_columnwise ? 32 * (1 + rng.below(5)) : 1 + rng.below(160);
    if (!r.mx_columnwise && rng.below(4) == 0) return {K};  // 1-D
    if (rng.below(3) == 0 && M % 2 == 0) return {2, M / 2, K};
    return {M, K};
  }
  switch (rng.below(4)) {
    case 0: return {1 + rng.below(3000)};                                   // 1-D
    case 1: return {1 + rng.below(300), 1 + rng.below(300)};                // off-grid
    case 2: return {128 * (1 + rng.below(2)), 128 * (1 + rng.below(2))};    // on-grid
    default: return {1 + rng.below(4), 1 + rng.below(100), 1 + rng.below(150)};
  }
}

// 1..64 fragments; cut points random, near block boundaries, or repeated (empty fragments).
std::vector<uint64_t> make_cuts(Rng& rng, uint64_t n, uint64_t K) {
  const uint64_t pieces = 1 + rng.below(64);
  std::vector<uint64_t> cuts = {0, n};
  for (uint64_t i = 1; i < pieces; ++i) {
    uint64_t c;
    switch (rng.below(4)) {
      case 0: c = (rng.below(n / 32 + 1)) * 32 + rng.below(3) - 1; break;
      case 1: c = (rng.below(n / std::max<uint64_t>(K, 1) + 1)) * K + rng.below(3) - 1; break;
      case 2: c = cuts[rng.below(cuts.size())]; break;  // an empty fragment
      default: c = rng.below(n + 1); break;
    }
    cuts.push_back(std::min(c, n));
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

std::string describe(const Recipe& r, Input in, const std::vector<uint64_t>& shape, size_t frags) {
  std::string s = std::string(scaling_name(r.scaling)) + " " + std::string(format_name(r.format)) +
                  (in == Input::f32 ? " f32" : in == Input::bf16 ? " bf16" : " f32_as_bf16") + (r.pow2 ? " pow2" : "") +
                  (r.scaling == Scaling::mxfp8 ? std::string(" ") + std::string(mx_rule_name(r.mx_rule)) +
                                                     (r.mx_rowwise ? " row" : "") + (r.mx_columnwise ? " col" : "")
                                               : "") +
                  " shape [";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "] fragments " + std::to_string(frags);
}

}  // namespace

TEST_CASE("fp8 sharded quantization equals full-tensor quantization", "[fp8][shard]") {
  Rng rng(20260822);
  ThreadPool pool(3);
  int cases = 0;
  for (int round = 0; round < 10; ++round)
    for (Format f : {Format::e4m3, Format::e5m2})
      for (const Recipe& r : all_recipes(f))
        for (Input in : {Input::f32, Input::bf16, Input::f32_as_bf16}) {
          const std::vector<uint64_t> shape = make_shape(rng, r);
          const Plan p = make_plan(r, in, shape);
          const uint64_t n = p.numel();
          const std::vector<float> vals = make_values(rng, n, round % 2 == 1);
          std::vector<uint16_t> bf(n);
          for (uint64_t i = 0; i < n; ++i) bf[i] = bf16_from_float(vals[i]);
          const void* x = in == Input::bf16 ? static_cast<const void*>(bf.data()) : vals.data();
          const size_t esize = in == Input::bf16 ? 2 : 4;
          const auto at = [&](uint64_t i) { return static_cast<const uint8_t*>(x) + i * esize; };
          QuantizeOptions opt;
          if (r.scaling == Scaling::delayed) opt.scale = 0x1p-3f * static_cast<float>(1 + rng.below(100));

          // The reference: the whole tensor (MX rowwise takes its fused one-pass path).
          const QuantizedTensor full = quantize_tensor(r, in, shape, x, "t", opt);
          if (in == Input::f32_as_bf16) {
            // fp32 rounded on the fly is exactly the stored-bf16 quantization of bf16(values).
            const QuantizedTensor via = quantize_tensor(r, Input::bf16, shape, bf.data(), "t", opt);
            REQUIRE(same_bits(via.amax.row, full.amax.row));
            REQUIRE(same_bits(via.amax.col, full.amax.col));
            REQUIRE(via.data == full.data);
            REQUIRE(via.data_col == full.data_col);
            REQUIRE(via.scale_inv == full.scale_inv);
          }
          const std::vector<uint64_t> cuts = make_cuts(rng, n, p.K);
          INFO(describe(r, in, shape, cuts.size() - 1));

          // Each fragment on its own "rank": its own zeroed grid, then a MAX-combine of all.
          AmaxGrid combined(p);
          for (size_t k = 0; k + 1 < cuts.size(); ++k) {
            AmaxGrid g(p);
            partial_amax(p, cuts[k], cuts[k + 1] - cuts[k], at(cuts[k]), g);
            combined.combine(g);
          }
          REQUIRE(same_bits(combined.row, full.amax.row));
          REQUIRE(same_bits(combined.col, full.amax.col));
          Scales sc;
          if (r.scaling == Scaling::delayed) {
            DelayedState st;
            st.scale = *opt.scale;
            st.scale_inv = 1.0f / st.scale;
            sc = delayed_scales(st);
          } else {
            sc = compute_scales(p, combined);
          }
          REQUIRE(same_bits(sc.scale, full.scales.scale));
          REQUIRE(same_bits(sc.scale_inv, full.scales.scale_inv));
          REQUIRE(same_bits(sc.e8m0, full.scales.e8m0));
          REQUIRE(same_bits(sc.e8m0_col, full.scales.e8m0_col));

          // Cast fragment by fragment into a poisoned buffer: every byte must be written, exactly.
          std::vector<uint8_t> data(p.has_rowwise() ? n : 0, 0xA5), col(p.has_columnwise() ? n : 0, 0xA5);
          for (size_t k = 0; k + 1 < cuts.size(); ++k)
            cast_fragment(p, sc.view(), cuts[k], cuts[k + 1] - cuts[k], at(cuts[k]),
                          data.empty() ? nullptr : data.data() + cuts[k], col.empty() ? nullptr : col.data() + cuts[k]);
          REQUIRE(data == full.data);
          REQUIRE(col == full.data_col);

          // The batched, threaded path over the same fragments, all sharing one grid.
          AmaxGrid bg(p);
          std::vector<uint8_t> bdata(data.size(), 0x5A), bcol(col.size(), 0x5A);
          std::vector<FragmentJob> jobs;
          for (size_t k = 0; k + 1 < cuts.size(); ++k) {
            FragmentJob j;
            j.plan = &p;
            j.start = cuts[k];
            j.count = cuts[k + 1] - cuts[k];
            j.in = at(cuts[k]);
            j.amax = bg.row.empty() ? nullptr : bg.row.data();
            j.amax_col = bg.col.empty() ? nullptr : bg.col.data();
            j.scales = sc.view();
            j.out = bdata.empty() ? nullptr : bdata.data() + cuts[k];
            j.out_col = bcol.empty() ? nullptr : bcol.data() + cuts[k];
            jobs.push_back(j);
          }
          batch_partial_amax(jobs.data(), jobs.size(), pool);
          REQUIRE(same_bits(bg.row, full.amax.row));
          REQUIRE(same_bits(bg.col, full.amax.col));
          batch_cast(jobs.data(), jobs.size(), pool);
          REQUIRE(bdata == full.data);
          REQUIRE(bcol == full.data_col);
          ++cases;
        }
  CHECK(cases == 10 * 2 * 14 * 3);
}

TEST_CASE("fp8 batched quantization splits large fragments across threads", "[fp8][shard]") {
  // Fragments larger than a batch piece (2^18 elements), so pieces of one fragment fold into one
  // grid from several threads.
  Rng rng(7);
  ThreadPool pool(4);
  for (const Recipe& r : {Recipe::tensorwise(), Recipe::blockwise_128x128(), Recipe::blockwise_1x128(),
                          Recipe::mxfp8(Format::e4m3, MxRule::rceil, true, true)}) {
    const std::vector<uint64_t> shape = {1024, 640};
    const Plan p = make_plan(r, Input::f32, shape);
    const std::vector<float> v = make_values(rng, p.numel(), false);
    const QuantizedTensor one = quantize_tensor(r, Input::f32, shape, v.data());
    QuantizeOptions opt;
    opt.pool = &pool;
    const QuantizedTensor many = quantize_tensor(r, Input::f32, shape, v.data(), "t", opt);
    CHECK(same_bits(one.amax.row, many.amax.row));
    CHECK(same_bits(one.amax.col, many.amax.col));
    CHECK(one.data == many.data);
    CHECK(one.data_col == many.data_col);
    CHECK(one.scale_inv == many.scale_inv);
  }
}

TEST_CASE("fp8 dequantize(quantize(x)) is within the format's error bound", "[fp8]") {
  Rng rng(99);
  for (Format f : {Format::e4m3, Format::e5m2}) {
    const int mb = f == Format::e4m3 ? 3 : 2;
    const int emin = f == Format::e4m3 ? -6 : -14;
    const float fmax = format_max(f);
    for (const Recipe& r : all_recipes(f)) {
      if (r.scaling == Scaling::delayed || !(r.scaling != Scaling::mxfp8 || r.mx_rowwise)) continue;
      const std::vector<uint64_t> shape = r.scaling == Scaling::mxfp8 ? std::vector<uint64_t>{96, 160}
                                                                      : std::vector<uint64_t>{200, 300};
      const Plan p = make_plan(r, Input::f32, shape);
      std::vector<float> v(p.numel());
      for (float& x : v)
        x = static_cast<float>((rng.below(2) ? -1.0 : 1.0) *
                               std::ldexp(1.0 + rng.unit(), static_cast<int>(rng.below(12)) - 6));
      const QuantizedTensor q = quantize_tensor(r, Input::f32, shape, v.data());
      const std::vector<float> d = dequantize_tensor(r, shape, q.data.data(), q.scale_inv.data());
      const ScaleView sv = q.scales.view();
      const GridMap g = grid_map(p);
      uint64_t bad = 0;
      for (uint64_t i = 0; i < p.numel(); ++i) {
        const uint64_t cell = cell_of(g, i / p.K, i % p.K);
        const double sinv = r.scaling == Scaling::mxfp8 ? mx_scale_value(sv.e8m0[cell]) : sv.scale_inv[cell];
        const double ax = std::fabs(static_cast<double>(v[i]));
        // Half an ulp relative, half a subnormal quantum absolute, plus what saturation clips (only
        // the MX floor rule saturates by design; the others by an fp32 rounding at most).
        const double bound = ax * std::ldexp(1.0, -(mb + 1)) * (1 + 1e-6) + std::ldexp(sinv, emin - mb - 1) +
                             std::max(0.0, ax - fmax * sinv);
        bad += std::fabs(static_cast<double>(d[i]) - static_cast<double>(v[i])) > bound;
      }
      INFO(std::string(scaling_name(r.scaling)) + " " + std::string(format_name(f)));
      CHECK(bad == 0);
    }
  }
}
