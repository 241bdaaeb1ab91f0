#include "cmd/bench/gpu_quantize_bench.h"

#include "core/error.h"

#if defined(FPGATHER_HAVE_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <memory>
#include <random>

#include "cmd/bench/cuda_timing.h"
#include "fp8/delayed.h"
#include "fp8/recipe.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"
#include "kernels/fp8_batch.h"
#include "kernels/fp8_shard.h"
#include "model/presets.h"
#endif

namespace fpg::bench {

#if defined(FPGATHER_HAVE_CUDA)
namespace {

namespace gpu = fpg::cuda::fp8;
using fp8::Plan;
using fp8::Recipe;
using fp8::Scaling;

struct Named {
  std::string name;
  Recipe recipe;
};

std::vector<Named> chosen(const std::vector<std::string>& names) {
  const std::vector<Named> all = {
      {"tensorwise", Recipe::tensorwise()},
      {"delayed", Recipe::delayed()},
      {"blockwise-1x128", Recipe::blockwise_1x128()},
      {"blockwise", Recipe::blockwise_128x128()},
      {"mxfp8", Recipe::mxfp8()},
      {"mxfp8-floor", Recipe::mxfp8(fp8::Format::e4m3, fp8::MxRule::floor)},
      {"mxfp8-both", Recipe::mxfp8(fp8::Format::e4m3, fp8::MxRule::rceil, true, true)},
  };
  if (names.empty()) return all;
  std::vector<Named> out;
  for (const auto& n : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Named& r) { return r.name == n; });
    if (it == all.end()) throw UsageError("bench gpu-quantize: unknown recipe '" + n + "'");
    out.push_back(*it);
  }
  return out;
}

// A device allocation, freed on scope exit.
template <class T>
struct Dev {
  T* p = nullptr;
  explicit Dev(uint64_t n) { FPG_CUDA_CHECK(cudaMalloc(&p, std::max<uint64_t>(n, 1) * sizeof(T))); }
  ~Dev() { (void)cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

// Two warm-up runs, then `reps` runs timed with CUDA events on the default stream (ms).
Timing time_events(const std::function<void()>& fn, int reps) { return time_cuda_ms(fn, 2, reps); }

// Gaussian weights with a few outliers: 2^20 values generated once, tiled over the buffer.
void fill_values(float* d, uint64_t n) {
  const uint64_t tile = std::min<uint64_t>(n, uint64_t{1} << 20);
  std::vector<float> v(tile);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& x : v) x = normal(rng);
  for (uint64_t i = 0; i < tile; i += 4099) v[i] *= 50.0f;
  FPG_CUDA_CHECK(cudaMemcpy(d, v.data(), tile * 4, cudaMemcpyHostToDevice));
  for (uint64_t done = tile; done < n; done += std::min(done, n - done))
    FPG_CUDA_CHECK(cudaMemcpy(d + done, d, std::min(done, n - done) * 4, cudaMemcpyDeviceToDevice));
}

// Scale bytes a plan writes: fp32 scale_inv per cell, or one E8M0 byte per cell and direction.
uint64_t scale_bytes(const Plan& p) {
  if (p.recipe.scaling == Scaling::mxfp8) return p.grid.size() + p.col_grid.size();
  return 4 * p.grid.size();
}

// Tensors make_fused_job takes whole (row blocks: MX rowwise, 1x128 with K % 128 == 0; tiles:
// 128x128, MX rowwise + columnwise, with K a multiple of a 16-byte vector).
bool fusable(const Plan& p) { return gpu::can_fuse(p, 0, p.numel()); }

uint64_t directions(const Plan& p) { return (p.has_rowwise() ? 1 : 0) + (p.has_columnwise() ? 1 : 0); }

// Minimum bytes a whole quantize of n elements moves: the outputs and scales written, and the fp32
// input read once, or twice for tensorwise, whose scale comes from the amax of the whole tensor (no
// single pass knows it before it casts). Block-local recipes (blockwise, MX: a one-pass kernel can
// reduce a block and cast it) and delayed (the previous step's scale) count one read, whether or not
// the timed path is one pass.
uint64_t quantize_bytes(const Plan& p, uint64_t n) {
  const uint64_t reads = p.recipe.scaling == Scaling::tensorwise ? 2 : 1;
  return 4 * n * reads + directions(p) * n + scale_bytes(p);
}

// Device buffers of one tensor's (or many tensors', packed) grids and scales.
struct Grids {
  uint64_t cells = 0, col_cells = 0;
  std::unique_ptr<Dev<float>> amax, amax_col, scale, scale_inv, history;
  std::unique_ptr<Dev<uint8_t>> e8m0, e8m0_col;
  Grids(uint64_t c, uint64_t cc) : cells(c), col_cells(cc) {
    amax = std::make_unique<Dev<float>>(c);
    amax_col = std::make_unique<Dev<float>>(cc);
    scale = std::make_unique<Dev<float>>(c);
    scale_inv = std::make_unique<Dev<float>>(c);
    e8m0 = std::make_unique<Dev<uint8_t>>(c);
    e8m0_col = std::make_unique<Dev<uint8_t>>(cc);
  }
  void zero(cudaStream_t s) const {
    FPG_CUDA_CHECK(cudaMemsetAsync(amax->p, 0, cells * 4, s));
    if (col_cells) FPG_CUDA_CHECK(cudaMemsetAsync(amax_col->p, 0, col_cells * 4, s));
  }
};

GpuQuantizeRow row(const std::string& recipe, const std::string& pass, uint64_t elements, uint64_t bytes,
                   const Timing& t, double copy_gbps) {
  GpuQuantizeRow r;
  r.recipe = recipe;
  r.pass = pass;
  r.elements = elements;
  r.bytes = bytes;
  r.median_ms = t.median;
  r.best_ms = t.best;
  r.gbps = t.median > 0 ? bytes / (t.median * 1e-3) / 1e9 : 0;
  r.ratio = copy_gbps > 0 ? r.gbps / copy_gbps : 0;
  return r;
}

}  // namespace

GpuQuantizeReport run_gpu_quantize_bench(const GpuQuantizeBenchOptions& opt) {
  if (cuda::device_count() == 0) throw UsageError("bench gpu-quantize: no CUDA device");
  if (opt.reps < 1) throw UsageError("bench gpu-quantize: --reps must be positive");
  const std::vector<Named> recipes = chosen(opt.recipes);
  GpuQuantizeReport rep;
  rep.device = cuda::device_description(0);
  const cudaStream_t s = nullptr;

  // ---- one large tensor ---------------------------------------------------------------------------
  const uint64_t n = opt.rows * opt.cols;
  Dev<float> x(n);
  Dev<uint8_t> copy_dst(4 * n), out(n), out_col(n);
  fill_values(x.p, n);
  const Timing tc = time_events(
      [&] { FPG_CUDA_CHECK(cudaMemcpyAsync(copy_dst.p, x.p, 4 * n, cudaMemcpyDeviceToDevice, s)); }, opt.reps);
  const double copy_gbps = 8.0 * n / (tc.median * 1e-3) / 1e9;
  rep.rows.push_back(row("memcpy", "copy", n, 8 * n, tc, copy_gbps));

  for (const Named& nr : recipes) {
    Plan p;
    try {
      p = fp8::make_plan(nr.recipe, fp8::Input::f32, opt.rows, opt.cols, "bench");
    } catch (const UsageError&) {
      continue;  // MX needs multiples of 32
    }
    const bool delayed = p.recipe.scaling == Scaling::delayed;
    Grids g(p.grid.size(), p.col_grid.size());
    fp8::DelayedConfig dc;
    g.history = std::make_unique<Dev<float>>(dc.history_len);
    FPG_CUDA_CHECK(cudaMemset(g.history->p, 0, dc.history_len * 4));
    const std::vector<float> one{1.0f};
    FPG_CUDA_CHECK(cudaMemcpy(g.scale->p, one.data(), 4, cudaMemcpyHostToDevice));
    fp8::ScaleView sv;
    sv.scale = g.scale->p;
    sv.scale_inv = g.scale_inv->p;
    sv.e8m0 = g.e8m0->p;
    sv.e8m0_col = g.e8m0_col->p;
    uint8_t* o = p.has_rowwise() ? out.p : nullptr;
    uint8_t* oc = p.has_columnwise() ? out_col.p : nullptr;
    float* ac = p.has_columnwise() ? g.amax_col->p : nullptr;
    const gpu::DeviceBatch amax({gpu::make_device_job(p, 0, n, x.p, g.amax->p, ac, {}, nullptr, nullptr)});
    const gpu::DeviceBatch cast({gpu::make_device_job(p, 0, n, x.p, delayed ? g.amax->p : nullptr, nullptr, sv, o, oc)});
    std::unique_ptr<gpu::ScaleBatch> scales;
    if (!delayed)
      scales = std::make_unique<gpu::ScaleBatch>(std::vector<gpu::ScaleJob>{gpu::make_scale_job(
          p, g.amax->p, ac, g.scale->p, g.scale_inv->p, g.e8m0->p, p.has_columnwise() ? g.e8m0_col->p : nullptr)});
    const uint64_t sb = scale_bytes(p), dirs = directions(p);
    const Timing ta = time_events([&] { g.zero(s); amax.partial_amax(s); }, opt.reps);
    rep.rows.push_back(row(nr.name, "amax", n, 4 * n + 4 * (g.cells + g.col_cells), ta, copy_gbps));
    const Timing tcast = time_events([&] { cast.cast(s); }, opt.reps);
    rep.rows.push_back(row(nr.name, delayed ? "cast+amax" : "cast", n, 4 * n + dirs * n + sb, tcast, copy_gbps));
    const Timing tq = time_events(
        [&] {
          g.zero(s);
          if (delayed) {  // cast with the previous scale, fold this step's amax, update from the history
            cast.cast(s);
            gpu::delayed_update(dc, 1, g.amax->p, g.history->p, g.scale->p, g.scale_inv->p, s);
          } else {
            amax.partial_amax(s);
            scales->run(s);
            cast.cast(s);
          }
        },
        opt.reps);
    rep.rows.push_back(row(nr.name, "quantize", n, quantize_bytes(p, n), tq, copy_gbps));
    if (fusable(p)) {  // whole blocks / tiles: amax, scales and cast in one pass
      const gpu::DeviceBatch fused({gpu::make_fused_job(p, 0, n, x.p, nullptr, nullptr, g.scale->p, g.scale_inv->p,
                                                        g.e8m0->p, p.has_columnwise() ? g.e8m0_col->p : nullptr, o, oc)});
      const Timing tf = time_events([&] { fused.cast(s); }, opt.reps);
      rep.rows.push_back(row(nr.name, "fused", n, 4 * n + dirs * n + sb, tf, copy_gbps));
    }
  }

  // ---- batched copy-back over many parameters ---------------------------------------------------
  const model::ModelSpec spec = model::preset(opt.model);
  std::vector<std::vector<uint64_t>> shapes;
  while (shapes.size() < std::max<uint64_t>(opt.min_params, 1))
    for (const auto& prm : spec.params) shapes.push_back(prm.shape);
  std::vector<uint64_t> offset;  // each parameter 16-byte aligned in the flat buffers
  uint64_t total = 0, elements = 0;
  for (const auto& sh : shapes) {
    uint64_t numel = 1;
    for (uint64_t d : sh) numel *= d;
    offset.push_back(total);
    total += (numel + 15) / 16 * 16;
    elements += numel;
  }
  rep.batch_params = shapes.size();
  rep.batch_elements = elements;
  if (!opt.shapes_json.empty()) {
    std::ofstream f(opt.shapes_json);
    f << "{\"model\": \"" << opt.model << "\", \"shapes\": [";
    for (size_t i = 0; i < shapes.size(); ++i) {
      f << (i ? ", [" : "[");
      for (size_t k = 0; k < shapes[i].size(); ++k) f << (k ? ", " : "") << shapes[i][k];
      f << "]";
    }
    f << "]}\n";
    if (!f) throw UsageError("bench gpu-quantize: cannot write " + opt.shapes_json);
  }
  Dev<float> masters(total);
  Dev<uint8_t> bout(total);
  fill_values(masters.p, total);
  for (const Named& nr : recipes) {
    if (nr.recipe.scaling == Scaling::delayed || nr.name == "mxfp8-floor") continue;
    std::vector<Plan> plans;
    try {
      for (const auto& sh : shapes) plans.push_back(fp8::make_plan(nr.recipe, fp8::Input::f32, sh, "batch"));
    } catch (const UsageError&) {
      continue;
    }
    uint64_t cells = 0, col_cells = 0, sb = 0;
    for (const Plan& p : plans) {
      cells += p.grid.size();
      col_cells += p.col_grid.size();
      sb += scale_bytes(p);
    }
    Grids g(cells, col_cells);
    Dev<uint8_t> bout_col(plans.front().has_columnwise() ? total : 0);
    std::vector<gpu::DeviceJob> jobs;
    std::vector<gpu::ScaleJob> sjobs;
    uint64_t c = 0, cc = 0;
    for (size_t i = 0; i < plans.size(); ++i) {
      const Plan& p = plans[i];
      fp8::ScaleView sv;
      sv.scale = g.scale->p + c;
      sv.e8m0 = g.e8m0->p + c;
      sv.e8m0_col = g.e8m0_col->p + cc;
      float* ac = p.has_columnwise() ? g.amax_col->p + cc : nullptr;
      jobs.push_back(gpu::make_device_job(p, 0, p.numel(), masters.p + offset[i], g.amax->p + c, ac, sv,
                                          p.has_rowwise() ? bout.p + offset[i] : nullptr,
                                          p.has_columnwise() ? bout_col.p + offset[i] : nullptr));
      sjobs.push_back(gpu::make_scale_job(p, g.amax->p + c, ac, g.scale->p + c, g.scale_inv->p + c, g.e8m0->p + c,
                                          p.has_columnwise() ? g.e8m0_col->p + cc : nullptr));
      c += p.grid.size();
      cc += p.col_grid.size();
    }
    const gpu::DeviceBatch batch(jobs);
    const gpu::ScaleBatch scales(sjobs);
    const uint64_t dirs = directions(plans.front());
    const Timing t = time_events(
        [&] {
          g.zero(s);
          batch.partial_amax(s);
          scales.run(s);
          batch.cast(s);
        },
        opt.reps);
    const uint64_t reads = nr.recipe.scaling == Scaling::tensorwise ? 2 : 1;  // as quantize_bytes
    rep.rows.push_back(row("batch:" + nr.name, "quantize", elements, 4 * elements * reads + dirs * elements + sb, t, copy_gbps));
    if (std::any_of(plans.begin(), plans.end(), fusable)) {
      // The copy-back with every tensor that qualifies fused (one launch per kind of kernel), the
      // others through partial amax + scales + cast as above.
      std::vector<gpu::DeviceJob> fj;
      std::vector<gpu::ScaleJob> rest;
      uint64_t c2 = 0, cc2 = 0;
      for (size_t i = 0; i < plans.size(); ++i) {
        const Plan& p = plans[i];
        if (fusable(p)) {
          fj.push_back(gpu::make_fused_job(p, 0, p.numel(), masters.p + offset[i], nullptr, nullptr, g.scale->p + c2,
                                           g.scale_inv->p + c2, g.e8m0->p + c2,
                                           p.has_columnwise() ? g.e8m0_col->p + cc2 : nullptr,
                                           p.has_rowwise() ? bout.p + offset[i] : nullptr,
                                           p.has_columnwise() ? bout_col.p + offset[i] : nullptr));
        } else {
          fj.push_back(jobs[i]);
          rest.push_back(sjobs[i]);
        }
        c2 += p.grid.size();
        cc2 += p.col_grid.size();
      }
      const gpu::DeviceBatch fused(fj);
      const gpu::ScaleBatch rest_scales(rest);
      const bool all = rest.empty();
      const Timing tf = time_events(
          [&] {
            if (!all) {
              g.zero(s);
              fused.partial_amax(s);
              rest_scales.run(s);
            }
            fused.cast(s);
          },
          opt.reps);
      rep.rows.push_back(row("batch:" + nr.name, "fused", elements, 4 * elements * reads + dirs * elements + sb, tf, copy_gbps));
    }
  }
  return rep;
}

#else

GpuQuantizeReport run_gpu_quantize_bench(const GpuQuantizeBenchOptions&) {
  throw UsageError("bench gpu-quantize: this fpgather was built without CUDA (-DFPGATHER_CUDA=OFF or no toolkit)");
}

#endif

}  // namespace fpg::bench
