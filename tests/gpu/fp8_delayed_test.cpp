// GPU delayed scaling (record + update + roll, many tensors per launch) and the MX scale swizzle,
// against fp8/delayed.h and fp8/mx_swizzle.h, bit for bit.
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "fp8/delayed.h"
#include "fp8/mx_swizzle.h"
#include "fp8/recipe.h"
#include "fp8_gpu_util.h"
#include "kernels/fp8_shard.h"

using namespace fpg;
using namespace fpg::fp8;
using namespace fpg::gpu_test;
namespace gpu = fpg::cuda::fp8;

TEST_CASE("GPU delayed scaling equals delayed_record + delayed_update", "[gpu][fp8]") {
  Rng rng(3);
  for (size_t L : {size_t{1}, size_t{2}, size_t{5}, size_t{1024}})
    for (AmaxAlgo algo : {AmaxAlgo::max, AmaxAlgo::most_recent})
      for (int margin : {0, 2, -3}) {
        DelayedConfig c;
        c.history_len = L;
        c.algo = algo;
        c.margin = margin;
        c.format = margin == 2 ? Format::e5m2 : Format::e4m3;
        const size_t n = 37;
        std::vector<DelayedState> st(n, DelayedState(c));
        std::vector<float> hist, amax(n), scale(n), scale_inv(n);
        for (size_t i = 0; i < n; ++i) {
          const std::vector<float> v = awkward_values(rng, L + 1);
          for (size_t k = 0; k < L; ++k) st[i].amax_history[k] = i % 5 == 0 ? 0.0f : std::fabs(v[k]);
          if (i % 7 == 1) st[i].amax_history[0] = bits_float(0x7FC00000u);  // NaN never wins
          amax[i] = i % 3 == 0 ? 0.0f : v[L];
          st[i].scale = static_cast<float>(1 + i);
          st[i].scale_inv = 1.0f / st[i].scale;
          hist.insert(hist.end(), st[i].amax_history.begin(), st[i].amax_history.end());
          scale[i] = st[i].scale;
          scale_inv[i] = st[i].scale_inv;
        }
        DevBuf<float> dh(hist), da(amax), ds(scale), dsi(scale_inv);
        gpu::delayed_update(c, n, da.p, dh.p, ds.p, dsi.p, nullptr);
        std::vector<float> want_h, want_s, want_si;
        for (size_t i = 0; i < n; ++i) {
          delayed_record(st[i], amax[i]);
          delayed_update(c, st[i]);
          want_h.insert(want_h.end(), st[i].amax_history.begin(), st[i].amax_history.end());
          want_s.push_back(st[i].scale);
          want_si.push_back(st[i].scale_inv);
        }
        CHECK(same_bits(want_h, dh.download()));
        CHECK(same_bits(want_s, ds.download()));
        CHECK(same_bits(want_si, dsi.download()));
      }
  DelayedConfig bad;
  bad.margin = 200;
  REQUIRE_THROWS_AS(gpu::delayed_update(bad, 1, nullptr, nullptr, nullptr, nullptr, nullptr), UsageError);
}

TEST_CASE("GPU MX scale swizzle equals mx_swizzle_rowwise / columnwise", "[gpu][fp8]") {
  Rng rng(11);
  for (auto shape : std::vector<std::vector<uint64_t>>{{32, 32}, {160, 96}, {96, 4128}, {1024, 160}, {33 * 32, 64}}) {
    const Plan p = make_plan(Recipe::mxfp8(Format::e4m3, MxRule::rceil, true, true), Input::f32, shape);
    std::vector<uint8_t> row(p.grid.size()), col(p.col_grid.size());
    for (auto& b : row) b = static_cast<uint8_t>(1 + rng.below(254));
    for (auto& b : col) b = static_cast<uint8_t>(1 + rng.below(254));
    const std::vector<uint8_t> want_r = mx_swizzle_rowwise(p, row.data());
    const std::vector<uint8_t> want_c = mx_swizzle_columnwise(p, col.data());
    DevBuf<uint8_t> dr(row), dc(col), outr(want_r.size()), outc(want_c.size());
    FPG_CUDA_CHECK(cudaMemset(outr.p, 0xCD, want_r.size()));
    FPG_CUDA_CHECK(cudaMemset(outc.p, 0xCD, want_c.size()));
    gpu::mx_swizzle_rowwise(p, dr.p, outr.p, nullptr);
    gpu::mx_swizzle_columnwise(p, dc.p, outc.p, nullptr);
    CHECK(first_diff(want_r, outr.download()) < 0);
    CHECK(first_diff(want_c, outc.download()) < 0);
  }
}
