// The GPU shard API (kernels/fp8_shard.h) against the CPU reference (fp8/shard.h), bit for bit: partial
// amax over random splits into fragments (empty ones, ones straddling rows and blocks), scales,
// casts and dequantisation, for every recipe, both formats, both MX scale rules, every input type,
// awkward shapes (partial blocks, K not a multiple of the vector width, 1-D and 3-D), misaligned
// inputs, and NaN / inf / subnormal / +-0 values.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "fp8/shard.h"
#include "fp8/source.h"
#include "fp8_gpu_util.h"
#include "kernels/fp8_batch.h"
#include "kernels/fp8_shard.h"

using namespace fpg;
using namespace fpg::fp8;
using namespace fpg::gpu_test;
namespace gpu = fpg::cuda::fp8;

namespace {

std::vector<Recipe> recipes() {
  std::vector<Recipe> r;
  for (Format f : {Format::e4m3, Format::e5m2}) {
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
      r.push_back(Recipe::mxfp8(f, rule, false, true));
      r.push_back(Recipe::mxfp8(f, rule, true, true));
    }
  }
  return r;
}

std::string name(const Plan& p, const std::vector<uint64_t>& shape, uint64_t offset) {
  std::string s = std::string(scaling_name(p.recipe.scaling)) + "/" + std::string(format_name(p.recipe.format));
  s += p.recipe.pow2 ? "/pow2" : "";
  if (p.recipe.scaling == Scaling::mxfp8)
    s += "/" + std::string(mx_rule_name(p.recipe.mx_rule)) + (p.has_rowwise() ? "/row" : "") +
         (p.has_columnwise() ? "/col" : "");
  s += p.input == Input::f32 ? " f32" : p.input == Input::bf16 ? " bf16" : " f32_as_bf16";
  s += " [";
  for (uint64_t d : shape) s += std::to_string(d) + ",";
  return s + "] offset " + std::to_string(offset);
}

template <class T>
void expect_same(const std::vector<T>& cpu, const std::vector<T>& gpu, const std::string& what) {
  const long d = first_diff(cpu, gpu);
  if (d >= 0) std::printf("MISMATCH %s at %ld\n", what.c_str(), d);
  CHECK(d < 0);
}

// Random cut points of [0, n]: fragments of every kind, some empty.
std::vector<uint64_t> cuts(Rng& rng, uint64_t n) {
  std::vector<uint64_t> c{0, n};
  const uint64_t k = rng.below(6);
  for (uint64_t i = 0; i < k; ++i) c.push_back(rng.below(n + 1));
  if (rng.below(2)) c.push_back(c[2 % c.size()]);  // an empty fragment
  std::sort(c.begin(), c.end());
  return c;
}

void check_plan(const Plan& p, const std::vector<uint64_t>& shape, Rng& rng, uint64_t offset) {
  const std::string what = name(p, shape, offset);
  const uint64_t n = p.numel();
  const size_t es = input_size(p.input);
  std::vector<float> values = awkward_values(rng, n);
  std::vector<uint8_t> in(n * es);
  if (p.input == Input::bf16) {
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t b = bf16_from_float(values[i]);
      if (rng.below(300) == 0) b = static_cast<uint16_t>(0x7F81u + rng.below(0x7E) + (rng.below(2) << 15));  // NaN payloads
      std::memcpy(&in[i * es], &b, 2);
    }
  } else {
    std::memcpy(in.data(), values.data(), n * 4);
  }
  // The device copy starts `offset` elements into its buffer (offset 1: unaligned, element-wise path).
  DevBuf<uint8_t> din((n + offset) * es + 16);
  if (n) FPG_CUDA_CHECK(cudaMemcpy(din.p + offset * es, in.data(), n * es, cudaMemcpyHostToDevice));
  const uint8_t* dx = din.p + offset * es;
  const std::vector<uint64_t> c = cuts(rng, n);

  // 1. partial amax over the fragments.
  AmaxGrid grid(p);
  DevBuf<float> damax(p.grid.size()), damax_col(p.col_grid.size());
  for (size_t f = 0; f + 1 < c.size(); ++f) {
    partial_amax(p, c[f], c[f + 1] - c[f], in.data() + c[f] * es, grid);
    gpu::partial_amax(p, c[f], c[f + 1] - c[f], dx + c[f] * es, damax.p, p.has_columnwise() ? damax_col.p : nullptr,
                      nullptr);
  }
  expect_same(grid.row, damax.download(), what + " amax");
  expect_same(grid.col, damax_col.download(), what + " amax_col");

  // 3. scales (delayed: a scale from the amax, as a history would give).
  Scales sc;
  DevBuf<float> dscale(p.grid.size()), dscale_inv(p.grid.size());
  DevBuf<uint8_t> de8(p.grid.size()), de8_col(p.col_grid.size());
  if (p.recipe.scaling == Scaling::delayed) {
    const float s = delayed_scale(grid.row[0], 1.0f, p.recipe.format, 0);
    sc.scale = {s};
    sc.scale_inv = {scale_inv_of(s)};
    REQUIRE_THROWS_AS(gpu::compute_scales(p, damax.p, nullptr, dscale.p, dscale_inv.p, nullptr, nullptr, nullptr),
                      UsageError);
    dscale.upload(sc.scale);
    dscale_inv.upload(sc.scale_inv);
  } else {
    sc = compute_scales(p, grid);
    gpu::compute_scales(p, damax.p, p.has_columnwise() ? damax_col.p : nullptr, dscale.p, dscale_inv.p, de8.p,
                        p.has_columnwise() ? de8_col.p : nullptr, nullptr);
    if (p.recipe.scaling == Scaling::mxfp8) {
      if (p.has_rowwise()) expect_same(sc.e8m0, de8.download(), what + " e8m0");
      expect_same(sc.e8m0_col, de8_col.download(), what + " e8m0_col");
    } else {
      expect_same(sc.scale, dscale.download(), what + " scale");
      expect_same(sc.scale_inv, dscale_inv.download(), what + " scale_inv");
    }
  }
  ScaleView dv;
  dv.scale = dscale.p;
  dv.scale_inv = dscale_inv.p;
  dv.e8m0 = de8.p;
  dv.e8m0_col = de8_col.p;

  // 4. cast, fragment by fragment, into outputs that start `offset` bytes into their buffers.
  std::vector<uint8_t> out(n, 0xAB), out_col(n, 0xAB);
  DevBuf<uint8_t> dout(n + offset + 8), dout_col(n + offset + 8);
  FPG_CUDA_CHECK(cudaMemset(dout.p, 0xAB, n + offset + 8));
  FPG_CUDA_CHECK(cudaMemset(dout_col.p, 0xAB, n + offset + 8));
  const ScaleView hv = sc.view();
  for (size_t f = 0; f + 1 < c.size(); ++f) {
    const uint64_t s = c[f], k = c[f + 1] - c[f];
    cast_fragment(p, hv, s, k, in.data() + s * es, p.has_rowwise() ? out.data() + s : nullptr,
                  p.has_columnwise() ? out_col.data() + s : nullptr);
    gpu::cast_fragment(p, dv, s, k, dx + s * es, p.has_rowwise() ? dout.p + offset + s : nullptr,
                       p.has_columnwise() ? dout_col.p + offset + s : nullptr, nullptr);
  }
  std::vector<uint8_t> g = dout.download(), gc = dout_col.download();
  expect_same(out, std::vector<uint8_t>(g.begin() + offset, g.begin() + offset + n), what + " data");
  expect_same(out_col, std::vector<uint8_t>(gc.begin() + offset, gc.begin() + offset + n), what + " data_col");
  CHECK(g[offset + n] == 0xAB);  // nothing written past the fragment

  // Dequantisation of one fragment (the middle one) of each direction.
  const uint64_t s = c[c.size() / 2 - 1], k = c[c.size() / 2] - s;
  for (bool col : {false, true}) {
    if (col ? !p.has_columnwise() : !p.has_rowwise()) continue;
    const std::vector<uint8_t>& q = col ? out_col : out;
    std::vector<float> back(k);
    dequantize_fragment(p, hv, s, k, q.data() + s, back.data(), col);
    DevBuf<uint8_t> dq(q);
    DevBuf<float> dback(k);
    gpu::dequantize_fragment(p, dv, s, k, dq.p + s, dback.p, col, nullptr);
    expect_same(back, dback.download(), what + (col ? " dequant_col" : " dequant"));
  }
}

const std::vector<std::vector<uint64_t>> kShapes = {
    {1},       {1000},     {3, 130},  {257, 300}, {129, 64}, {64, 96},  {96, 160},
    {33, 256}, {256, 384}, {32, 32},  {5, 6, 64}, {0, 64},   {160, 36}, {130, 257},
};

}  // namespace

TEST_CASE("fp8 GPU partial amax, scales, cast and dequantize equal the CPU for every recipe", "[gpu][fp8]") {
  Rng rng(20261129);
  int checked = 0;
  for (const Recipe& r : recipes())
    for (Input in : {Input::f32, Input::bf16, Input::f32_as_bf16})
      for (const auto& shape : kShapes) {
        Plan p;
        try {
          p = make_plan(r, in, shape);
        } catch (const UsageError&) {
          continue;  // MX needs multiples of 32
        }
        check_plan(p, shape, rng, rng.below(2));
        ++checked;
      }
  CHECK(checked > 400);
}

TEST_CASE("fp8 GPU kernels on larger tensors: many tasks, carries across rows and blocks", "[gpu][fp8]") {
  Rng rng(7);
  const std::vector<std::vector<uint64_t>> shapes = {{300, 4096}, {1, 1 << 20}, {1031, 1000}, {512, 2080}};
  for (const auto& shape : shapes)
    for (const Recipe& r : {Recipe::tensorwise(), Recipe::delayed(), Recipe::blockwise_1x128(),
                            Recipe::blockwise_128x128(), Recipe::mxfp8(Format::e4m3, MxRule::rceil, true, true),
                            Recipe::mxfp8(Format::e5m2, MxRule::floor, true, false)})
      for (Input in : {Input::f32, Input::bf16}) {
        Plan p;
        try {
          p = make_plan(r, in, shape);
        } catch (const UsageError&) {
          continue;
        }
        check_plan(p, shape, rng, 0);
      }
}

TEST_CASE("fp8 GPU fused one-pass jobs equal amax + scales + cast (MX rowwise, blockwise 1x128)", "[gpu][fp8]") {
  Rng rng(17);
  const std::vector<Recipe> rs = {Recipe::mxfp8(Format::e4m3, MxRule::rceil), Recipe::mxfp8(Format::e5m2, MxRule::floor),
                                  Recipe::blockwise_1x128(Format::e4m3, true),
                                  Recipe::blockwise_1x128(Format::e5m2, false)};
  for (const Recipe& r : rs)
    for (Input in : {Input::f32, Input::bf16, Input::f32_as_bf16})
      for (const auto& shape : std::vector<std::vector<uint64_t>>{{64, 256}, {3, 384}, {1, 4096}, {200, 1024}}) {
        const Plan p = make_plan(r, in, shape);
        const uint64_t n = p.numel(), es = input_size(p.input), block = r.scaling == Scaling::mxfp8 ? 32 : 128;
        std::vector<float> v = awkward_values(rng, n);
        std::vector<uint8_t> x(n * es);
        for (uint64_t i = 0; i < n; ++i) {
          if (es == 2) {
            const uint16_t b = bf16_from_float(v[i]);
            std::memcpy(&x[i * 2], &b, 2);
          } else {
            std::memcpy(&x[i * 4], &v[i], 4);
          }
        }
        // A fragment of whole blocks in the middle, as a rank owns.
        const uint64_t start = (n / block / 3) * block, count = (n / block / 2) * block;
        AmaxGrid g(p);
        partial_amax(p, start, count, x.data() + start * es, g);
        const Scales sc = compute_scales(p, g);
        std::vector<uint8_t> out(count);
        cast_fragment(p, sc.view(), start, count, x.data() + start * es, out.data(), nullptr);

        DevBuf<uint8_t> dx(x), dout(count);
        DevBuf<float> damax(p.grid.size()), dscale(p.grid.size()), dscale_inv(p.grid.size());
        DevBuf<uint8_t> de8(p.grid.size());
        gpu::DeviceBatch b({gpu::make_fused_job(p, start, count, dx.p + start * es, damax.p, dscale.p, dscale_inv.p,
                                                de8.p, dout.p)});
        b.cast(nullptr);
        const std::string what = name(p, shape, 0) + " fused";
        expect_same(out, dout.download(), what + " data");
        expect_same(g.row, damax.download(), what + " amax");
        // Cells outside the fragment stay as they were (zero); inside they equal compute_scales.
        const auto inside = [&](uint64_t c) {
          const uint64_t first = (c / p.grid.cols) * p.K + (c % p.grid.cols) * block;
          return first >= start && first + block <= start + count;
        };
        if (r.scaling == Scaling::mxfp8) {
          std::vector<uint8_t> want(p.grid.size(), 0);
          for (uint64_t c = 0; c < want.size(); ++c) want[c] = inside(c) ? sc.e8m0[c] : 0;
          expect_same(want, de8.download(), what + " e8m0");
        } else {
          std::vector<float> want(p.grid.size(), 0.0f), want_inv(p.grid.size(), 0.0f);
          for (uint64_t c = 0; c < want.size(); ++c) {
            want[c] = inside(c) ? sc.scale[c] : 0.0f;
            want_inv[c] = inside(c) ? sc.scale_inv[c] : 0.0f;
          }
          expect_same(want, dscale.download(), what + " scale");
          expect_same(want_inv, dscale_inv.download(), what + " scale_inv");
        }
      }
  const Plan bad = make_plan(Recipe::tensorwise(), Input::f32, std::vector<uint64_t>{4, 128});
  REQUIRE_THROWS_AS(gpu::make_fused_job(bad, 0, 512, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
                    InternalError);
}

// The fused tile jobs (blockwise 128x128; MX rowwise + columnwise): fragments of whole bands of
// tiles, including the tensor's last, partial band and a partial last column tile.
TEST_CASE("fp8 GPU fused one-pass tile jobs equal amax + scales + cast (128x128, MX both)", "[gpu][fp8]") {
  Rng rng(23);
  const std::vector<Recipe> rs = {Recipe::blockwise_128x128(Format::e4m3, true),
                                  Recipe::blockwise_128x128(Format::e5m2, false),
                                  Recipe::mxfp8(Format::e4m3, MxRule::rceil, true, true),
                                  Recipe::mxfp8(Format::e5m2, MxRule::floor, true, true)};
  const std::vector<std::vector<uint64_t>> shapes = {{300, 200}, {128, 136}, {1, 1000}, {257, 520}, {64, 544},
                                                     {96, 32},   {32, 1056}, {640, 64}, {2, 3, 48}};
  for (const Recipe& r : rs)
    for (Input in : {Input::f32, Input::bf16, Input::f32_as_bf16})
      for (const auto& shape : shapes) {
        Plan p;
        try {
          p = make_plan(r, in, shape);
        } catch (const UsageError&) {
          continue;  // MX needs multiples of 32
        }
        const bool mx = r.scaling == Scaling::mxfp8;
        const uint64_t n = p.numel(), es = input_size(p.input), band = (mx ? 32 : 128) * p.K;
        const uint64_t nb = (n + band - 1) / band;
        // Whole bands in the middle (to the end of the tensor when it has few bands), then all of it.
        for (const auto& [start, end] : std::vector<std::pair<uint64_t, uint64_t>>{
                 {nb / 3 * band, std::min(n, (nb / 3 + (nb + 1) / 2) * band)}, {0, n}}) {
          const uint64_t count = end - start;
          if (!gpu::can_fuse(p, start, count)) continue;  // K not a multiple of a 16-byte vector
          std::vector<float> v = awkward_values(rng, n);
          std::vector<uint8_t> x(n * es);
          for (uint64_t i = 0; i < n; ++i) {
            if (es == 2) {
              const uint16_t b = bf16_from_float(v[i]);
              std::memcpy(&x[i * 2], &b, 2);
            } else {
              std::memcpy(&x[i * 4], &v[i], 4);
            }
          }
          AmaxGrid g(p);
          partial_amax(p, start, count, x.data() + start * es, g);
          const Scales sc = compute_scales(p, g);
          std::vector<uint8_t> out(count), out_col(mx ? count : 0);
          cast_fragment(p, sc.view(), start, count, x.data() + start * es, out.data(), mx ? out_col.data() : nullptr);

          DevBuf<uint8_t> dx(x), dout(count), dout_col(mx ? count : 0);
          DevBuf<float> damax(p.grid.size()), damax_col(p.col_grid.size()), dscale(p.grid.size()),
              dscale_inv(p.grid.size());
          DevBuf<uint8_t> de8(p.grid.size()), de8c(p.col_grid.size());
          gpu::DeviceBatch b({gpu::make_fused_job(p, start, count, dx.p + start * es, damax.p, mx ? damax_col.p : nullptr,
                                                  dscale.p, dscale_inv.p, de8.p, mx ? de8c.p : nullptr, dout.p,
                                                  mx ? dout_col.p : nullptr)});
          b.cast(nullptr);
          const std::string what = name(p, shape, start) + " fused tiles [" + std::to_string(start) + ", " +
                                   std::to_string(end) + ")";
          expect_same(out, dout.download(), what + " data");
          expect_same(g.row, damax.download(), what + " amax");
          // Cells outside the fragment stay zero; inside they equal compute_scales.
          const auto inside = [&](uint64_t first) { return first >= start && first < end; };
          if (mx) {
            expect_same(out_col, dout_col.download(), what + " data_col");
            expect_same(g.col, damax_col.download(), what + " amax_col");
            std::vector<uint8_t> want(p.grid.size(), 0), want_col(p.col_grid.size(), 0);
            for (uint64_t c = 0; c < want.size(); ++c) want[c] = inside(c * 32) ? sc.e8m0[c] : 0;
            for (uint64_t c = 0; c < want_col.size(); ++c)
              want_col[c] = inside((c / p.K) * band + c % p.K) ? sc.e8m0_col[c] : 0;
            expect_same(want, de8.download(), what + " e8m0");
            expect_same(want_col, de8c.download(), what + " e8m0_col");
          } else {
            std::vector<float> want(p.grid.size(), 0.0f), want_inv(p.grid.size(), 0.0f);
            for (uint64_t c = 0; c < want.size(); ++c) {
              const bool in_frag = inside((c / p.grid.cols) * band);
              want[c] = in_frag ? sc.scale[c] : 0.0f;
              want_inv[c] = in_frag ? sc.scale_inv[c] : 0.0f;
            }
            expect_same(want, dscale.download(), what + " scale");
            expect_same(want_inv, dscale_inv.download(), what + " scale_inv");
          }
        }
      }
  // A fragment that cuts a band of tiles is not fused (it keeps partial amax + all-reduce).
  const Plan b128 = make_plan(Recipe::blockwise_128x128(), Input::f32, std::vector<uint64_t>{256, 256});
  CHECK(gpu::can_fuse(b128, 0, 128 * 256));
  CHECK(!gpu::can_fuse(b128, 0, 64 * 256));
  REQUIRE_THROWS_AS(gpu::make_fused_job(b128, 128, 1024, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
                    InternalError);
}

// More tiles than CTAs (each CTA runs several tasks, reusing its shared memory) and several jobs of
// one kind in one launch; partial last bands and column tiles.
// Two launch orders: a few large jobs (at least one tile per CTA each: CTAs walk the tiles strided)
// and many small ones (each CTA a contiguous run of tiles, across job boundaries).
TEST_CASE("fp8 GPU fused tile jobs: many tiles per CTA, several jobs per launch", "[gpu][fp8]") {
  Rng rng(29);
  for (const bool small : {false, true})
  for (const Recipe& r : {Recipe::blockwise_128x128(Format::e4m3, false),
                          Recipe::mxfp8(Format::e4m3, MxRule::rceil, true, true)}) {
    const bool mx = r.scaling == Scaling::mxfp8;
    std::vector<std::vector<uint64_t>> shapes = {{1056, mx ? 8224u : 8200u}, {4096, 2080}, {64, 544}, {160, 96}};
    if (small) {
      shapes.clear();
      for (uint64_t i = 0; i < 150; ++i) shapes.push_back({96 + 32 * (i % 7), 544 + 32 * (i % 5)});
    }
    std::vector<Plan> plans;
    for (const auto& sh : shapes) plans.push_back(make_plan(r, Input::f32, sh));
    struct Bufs {
      std::vector<float> x;
      AmaxGrid g;
      Scales sc;
      std::vector<uint8_t> out, out_col;
      std::unique_ptr<DevBuf<float>> dx, damax, damax_col, dscale, dscale_inv;
      std::unique_ptr<DevBuf<uint8_t>> dout, dout_col, de8, de8c;
    };
    std::vector<Bufs> b(plans.size());
    std::vector<gpu::DeviceJob> jobs;
    for (size_t i = 0; i < plans.size(); ++i) {
      const Plan& p = plans[i];
      const uint64_t n = p.numel();
      Bufs& t = b[i];
      t.x = awkward_values(rng, n);
      t.g = AmaxGrid(p);
      partial_amax(p, 0, n, t.x.data(), t.g);
      t.sc = compute_scales(p, t.g);
      t.out.resize(n);
      t.out_col.resize(mx ? n : 0);
      cast_fragment(p, t.sc.view(), 0, n, t.x.data(), t.out.data(), mx ? t.out_col.data() : nullptr);
      t.dx = std::make_unique<DevBuf<float>>(t.x);
      t.damax = std::make_unique<DevBuf<float>>(p.grid.size());
      t.damax_col = std::make_unique<DevBuf<float>>(p.col_grid.size());
      t.dscale = std::make_unique<DevBuf<float>>(p.grid.size());
      t.dscale_inv = std::make_unique<DevBuf<float>>(p.grid.size());
      t.dout = std::make_unique<DevBuf<uint8_t>>(n);
      t.dout_col = std::make_unique<DevBuf<uint8_t>>(mx ? n : 0);
      t.de8 = std::make_unique<DevBuf<uint8_t>>(p.grid.size());
      t.de8c = std::make_unique<DevBuf<uint8_t>>(p.col_grid.size());
      REQUIRE(gpu::can_fuse(p, 0, n));
      jobs.push_back(gpu::make_fused_job(p, 0, n, t.dx->p, t.damax->p, mx ? t.damax_col->p : nullptr, t.dscale->p,
                                         t.dscale_inv->p, t.de8->p, mx ? t.de8c->p : nullptr, t.dout->p,
                                         mx ? t.dout_col->p : nullptr));
    }
    gpu::DeviceBatch batch(jobs);
    batch.cast(nullptr);
    for (size_t i = 0; i < plans.size(); ++i) {
      const Plan& p = plans[i];
      const Bufs& t = b[i];
      const std::string what = name(p, shapes[i], 0) + (small ? " batched fused tiles (150 small jobs)" : " batched fused tiles");
      expect_same(t.out, t.dout->download(), what + " data");
      expect_same(t.g.row, t.damax->download(), what + " amax");
      if (mx) {
        expect_same(t.out_col, t.dout_col->download(), what + " data_col");
        expect_same(t.g.col, t.damax_col->download(), what + " amax_col");
        expect_same(t.sc.e8m0, t.de8->download(), what + " e8m0");
        expect_same(t.sc.e8m0_col, t.de8c->download(), what + " e8m0_col");
      } else {
        expect_same(t.sc.scale, t.dscale->download(), what + " scale");
        expect_same(t.sc.scale_inv, t.dscale_inv->download(), what + " scale_inv");
      }
    }
  }
}
