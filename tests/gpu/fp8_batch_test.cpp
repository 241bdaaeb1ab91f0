// The batched copy-back on the GPU (kernels/fp8_batch.h) against fp8::batch_partial_amax /
// batch_cast: over 1,000 fragments of a few hundred tensors of mixed shapes, recipes, formats and
// inputs (grids shared by the fragments of a tensor), one launch per pass and kind of kernel, bit for bit.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "fp8/batch.h"
#include "fp8/delayed.h"
#include "fp8/recipe.h"
#include "fp8/source.h"
#include "fp8_gpu_util.h"
#include "kernels/fp8_batch.h"

using namespace fpg;
using namespace fpg::fp8;
using namespace fpg::gpu_test;
namespace gpu = fpg::cuda::fp8;

namespace {

Recipe random_recipe(Rng& rng) {
  const Format f = rng.below(4) ? Format::e4m3 : Format::e5m2;
  switch (rng.below(7)) {
    case 0: return Recipe::tensorwise(f, rng.below(2));
    case 1: return Recipe::delayed(f);
    case 2: return Recipe::blockwise_1x128(f, rng.below(2));
    case 3: return Recipe::blockwise_128x128(f, rng.below(2));
    case 4: return Recipe::mxfp8(f, MxRule::rceil, true, rng.below(2));
    case 5: return Recipe::mxfp8(f, MxRule::floor, true, rng.below(2));
    default: return Recipe::mxfp8(f, rng.below(2) ? MxRule::rceil : MxRule::floor, false, true);
  }
}

std::vector<uint64_t> random_shape(Rng& rng, const Recipe& r) {
  const bool mx = r.scaling == Scaling::mxfp8;
  uint64_t M = 1 + rng.below(300), K = 1 + rng.below(700);
  if (mx) {
    M = 32 * (1 + rng.below(6));
    K = 32 * (1 + rng.below(12));
  }
  switch (rng.below(4)) {
    case 0: return {M * K};  // 1-D
    case 1: return {M, K};
    case 2: return {M, K};
    default: return mx ? std::vector<uint64_t>{2, M / 2 * 2 == M ? M / 2 : M, K} : std::vector<uint64_t>{M, 3, K};
  }
}

struct Tensor {
  Plan plan;
  std::vector<uint8_t> in;  // host values
  std::unique_ptr<DevBuf<uint8_t>> din;
  AmaxGrid grid;
  std::unique_ptr<DevBuf<float>> damax, damax_col, dscale;
  std::unique_ptr<DevBuf<uint8_t>> de8, de8_col;
  Scales scales;
};

}  // namespace

TEST_CASE("fp8 GPU batched copy-back over 1000+ fragments equals batch_partial_amax and batch_cast", "[gpu][fp8]") {
  Rng rng(99);
  std::vector<Tensor> ts(320);
  uint64_t total = 0;
  for (Tensor& t : ts) {
    for (;;) {
      const Recipe r = random_recipe(rng);
      const Input in = static_cast<Input>(rng.below(3));
      try {
        t.plan = make_plan(r, in, random_shape(rng, r));
        break;
      } catch (const UsageError&) {
      }
    }
    const uint64_t n = t.plan.numel();
    const size_t es = input_size(t.plan.input);
    const std::vector<float> v = awkward_values(rng, n);
    t.in.resize(n * es);
    for (uint64_t i = 0; i < n; ++i) {
      if (es == 2) {
        const uint16_t b = bf16_from_float(v[i]);
        std::memcpy(&t.in[i * 2], &b, 2);
      } else {
        std::memcpy(&t.in[i * 4], &v[i], 4);
      }
    }
    t.din = std::make_unique<DevBuf<uint8_t>>(t.in);
    t.grid = AmaxGrid(t.plan);
    t.damax = std::make_unique<DevBuf<float>>(t.plan.grid.size());
    t.damax_col = std::make_unique<DevBuf<float>>(t.plan.col_grid.size());
    total += n;
  }

  // Fragments: each tensor cut at random points (empty fragments kept), in shuffled order.
  struct Frag {
    size_t t;
    uint64_t start, count;
  };
  std::vector<Frag> frags;
  for (size_t i = 0; i < ts.size(); ++i) {
    const uint64_t n = ts[i].plan.numel();
    std::vector<uint64_t> c{0, n};
    for (uint64_t k = rng.below(6); k > 0; --k) c.push_back(rng.below(n + 1));
    std::sort(c.begin(), c.end());
    for (size_t f = 0; f + 1 < c.size(); ++f) frags.push_back({i, c[f], c[f + 1] - c[f]});
  }
  std::shuffle(frags.begin(), frags.end(), rng.g);
  REQUIRE(frags.size() >= 1000);

  // Partial amax: CPU batch vs one GPU launch.
  ThreadPool pool(2);
  std::vector<FragmentJob> cpu(frags.size()), dev(frags.size());
  for (size_t i = 0; i < frags.size(); ++i) {
    Tensor& t = ts[frags[i].t];
    const size_t es = input_size(t.plan.input);
    FragmentJob& c = cpu[i];
    c.plan = &t.plan;
    c.start = frags[i].start;
    c.count = frags[i].count;
    c.in = t.in.data() + c.start * es;
    c.amax = t.grid.row.data();
    c.amax_col = t.grid.col.empty() ? nullptr : t.grid.col.data();
    FragmentJob& d = dev[i];
    d = c;
    d.in = t.din->p + c.start * es;
    d.amax = t.damax->p;
    d.amax_col = t.plan.has_columnwise() ? t.damax_col->p : nullptr;
  }
  batch_partial_amax(cpu.data(), cpu.size(), pool);
  std::vector<gpu::DeviceJob> amax_jobs;
  for (const FragmentJob& d : dev) amax_jobs.push_back(gpu::make_device_job(d));
  {
    gpu::DeviceBatch b(amax_jobs);
    b.partial_amax(nullptr);
    FPG_CUDA_CHECK(cudaDeviceSynchronize());
  }
  int bad = 0;
  for (Tensor& t : ts) {
    bad += first_diff(t.grid.row, t.damax->download()) >= 0;
    bad += first_diff(t.grid.col, t.damax_col->download()) >= 0;
  }
  CHECK(bad == 0);

  // Scales: one GPU launch for all tensors (delayed ones take a scale from their amax).
  std::vector<gpu::ScaleJob> sj;
  for (Tensor& t : ts) {
    const Plan& p = t.plan;
    t.dscale = std::make_unique<DevBuf<float>>(p.grid.size());
    t.de8 = std::make_unique<DevBuf<uint8_t>>(p.grid.size());
    t.de8_col = std::make_unique<DevBuf<uint8_t>>(p.col_grid.size());
    if (p.recipe.scaling == Scaling::delayed) {
      const float s = delayed_scale(t.grid.row[0], 1.0f, p.recipe.format, 0);
      t.scales.scale = {s};
      t.scales.scale_inv = {scale_inv_of(s)};
      t.dscale->upload(t.scales.scale);
      continue;
    }
    t.scales = compute_scales(p, t.grid);
    sj.push_back(gpu::make_scale_job(p, t.damax->p, t.damax_col->p, t.dscale->p, nullptr, t.de8->p,
                                     p.has_columnwise() ? t.de8_col->p : nullptr));
  }
  gpu::ScaleBatch(sj).run(nullptr);
  bad = 0;
  for (Tensor& t : ts) {
    if (t.plan.recipe.scaling == Scaling::mxfp8) {
      if (t.plan.has_rowwise()) bad += first_diff(t.scales.e8m0, t.de8->download()) >= 0;
      bad += first_diff(t.scales.e8m0_col, t.de8_col->download()) >= 0;
    } else {
      bad += first_diff(t.scales.scale, t.dscale->download()) >= 0;
    }
  }
  CHECK(bad == 0);

  // Cast: CPU batch vs one GPU launch, through the FragmentJob form of the API.
  std::vector<uint8_t> out(total), out_col(total);
  DevBuf<uint8_t> dout(total), dout_col(total);
  uint64_t base = 0;
  std::vector<uint64_t> tensor_base(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    tensor_base[i] = base;
    base += ts[i].plan.numel();
  }
  for (size_t i = 0; i < frags.size(); ++i) {
    Tensor& t = ts[frags[i].t];
    const uint64_t o = tensor_base[frags[i].t] + frags[i].start;
    cpu[i].scales = t.scales.view();
    cpu[i].out = t.plan.has_rowwise() ? out.data() + o : nullptr;
    cpu[i].out_col = t.plan.has_columnwise() ? out_col.data() + o : nullptr;
    cpu[i].amax = cpu[i].amax_col = nullptr;
    dev[i].scales.scale = t.dscale->p;
    dev[i].scales.e8m0 = t.de8->p;
    dev[i].scales.e8m0_col = t.de8_col->p;
    dev[i].out = t.plan.has_rowwise() ? dout.p + o : nullptr;
    dev[i].out_col = t.plan.has_columnwise() ? dout_col.p + o : nullptr;
    dev[i].amax = dev[i].amax_col = nullptr;
  }
  batch_cast(cpu.data(), cpu.size(), pool);
  gpu::batch_cast(dev.data(), dev.size(), nullptr);
  const long d1 = first_diff(out, dout.download()), d2 = first_diff(out_col, dout_col.download());
  if (d1 >= 0 || d2 >= 0) std::printf("batched cast differs at %ld / %ld\n", d1, d2);
  CHECK(d1 < 0);
  CHECK(d2 < 0);
}

TEST_CASE("fp8 GPU delayed cast folds the step's amax in the same pass", "[gpu][fp8]") {
  Rng rng(5);
  const Plan p = make_plan(Recipe::delayed(), Input::f32, std::vector<uint64_t>{777, 1000});
  const std::vector<float> v = awkward_values(rng, p.numel());
  DevBuf<float> dx(v), damax(1), dscale(std::vector<float>{0.5f});
  DevBuf<uint8_t> dout(p.numel());
  ScaleView s;
  s.scale = dscale.p;
  gpu::DeviceBatch b({gpu::make_device_job(p, 0, p.numel(), dx.p, damax.p, nullptr, s, dout.p, nullptr)});
  b.cast(nullptr);
  AmaxGrid g(p);
  partial_amax(p, 0, p.numel(), v.data(), g);
  CHECK(first_diff(g.row, damax.download()) < 0);
  std::vector<uint8_t> out(p.numel());
  Scales hs;
  hs.scale = {0.5f};
  cast_fragment(p, hs.view(), 0, p.numel(), v.data(), out.data(), nullptr);
  CHECK(first_diff(out, dout.download()) < 0);
}
