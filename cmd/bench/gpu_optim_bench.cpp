#include "cmd/bench/gpu_optim_bench.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "core/error.h"

#if defined(FPGATHER_HAVE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cmd/bench/cuda_timing.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"
#include "kernels/grad_norm.h"
#include "kernels/muon.h"
#include "kernels/optim_fused.h"
#include "pipeline/grad_norm.h"
#endif

namespace fpg::bench {

#if !defined(FPGATHER_HAVE_CUDA)

GpuOptimBenchResult run_gpu_optim_bench(const GpuOptimBenchOptions&) {
  throw UsageError("bench gpu-optim: this fpgather was built without CUDA");
}

#else

namespace {

// A device buffer of floats, zero or uniform in [-a, a] (a cheap host generator: the values only need
// to be ordinary numbers, and hundreds of millions are made per run).
class DevFloats {
 public:
  DevFloats(size_t n, float a, uint64_t seed) : n_(n) {
    FPG_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(float)));
    if (a == 0.0f) {
      FPG_CUDA_CHECK(cudaMemset(p_, 0, n * sizeof(float)));
      return;
    }
    std::vector<float> h(n);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& v : h) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
      v = a * (static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
    FPG_CUDA_CHECK(cudaMemcpy(p_, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~DevFloats() { cudaFree(p_); }
  DevFloats(const DevFloats&) = delete;
  DevFloats& operator=(const DevFloats&) = delete;
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

GpuTimedRow make_row(std::string what, std::string shape, int64_t matrices, int64_t elements, uint64_t bytes,
                     const Timing& t) {
  GpuTimedRow r;
  r.what = std::move(what);
  r.shape = std::move(shape);
  r.matrices = matrices;
  r.elements = elements;
  r.bytes = bytes;
  r.median_ms = t.median;
  r.min_ms = t.best;
  return r;
}

int64_t round_up4(int64_t n) { return (n + 3) / 4 * 4; }

double ns_flops(int64_t rows, int64_t cols, int steps) {
  const double m = double(std::min(rows, cols)), n = double(std::max(rows, cols));
  return steps * (4 * m * m * n + 2 * m * m * m);
}

}  // namespace

GpuOptimBenchResult run_gpu_optim_bench(const GpuOptimBenchOptions& opt) {
  if (cuda::device_count() == 0) throw UsageError("bench gpu-optim: no CUDA device");
  if (opt.iters < 1 || opt.warmup < 0) throw UsageError("bench gpu-optim: --iters must be >= 1, --warmup >= 0");
  GpuOptimBenchResult res;
  res.device = cuda::device_description(0);
  FPG_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t s = nullptr;
  FPG_CUDA_CHECK(cudaStreamCreate(&s));
  cublasHandle_t blas = nullptr;
  FPG_CUBLAS_CHECK(cublasCreate(&blas));
  const auto timed = [&](const std::function<void()>& fn) { return time_cuda_ms(fn, opt.warmup, opt.iters, s); };

  {  // the roofline: a device-to-device copy of 1 GiB
    const size_t bytes = size_t(1) << 30;
    DevFloats a(bytes / 4, 0.0f, 1), b(bytes / 4, 0.0f, 2);
    const auto t = timed([&] { FPG_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s)); });
    GpuTimedRow r = make_row("copy", "", 0, int64_t(bytes / 4), 2 * bytes, t);
    r.gbps = r.bytes / (t.median * 1e-3) / 1e9;
    r.ratio_to_copy = 1.0;
    res.rows.push_back(r);
  }
  const double copy_gbps = res.rows.front().gbps;

  // Every parameter of the model as one fragment, each starting 16-byte aligned in one buffer.
  int64_t total = 0, elements = 0;
  std::vector<int64_t> offsets;
  for (const model::Param& p : opt.spec.params) {
    offsets.push_back(total);
    res.param_shapes.emplace_back(p.shape.begin(), p.shape.end());
    total += round_up4(int64_t(p.numel()));
    elements += int64_t(p.numel());
    if (p.muon_eligible()) res.model_muon_shapes.emplace_back(int64_t(p.shape[0]), int64_t(p.shape[1]));
  }
  {
    DevFloats p(total, 0.02f, 3), g(total, 1e-3f, 4), m(total, 0.0f, 5), v(total, 0.0f, 6);
    const auto frags = [&](bool adam) {
      std::vector<optim::Fragment> f;
      for (size_t i = 0; i < offsets.size(); ++i) {
        const int64_t o = offsets[i], n = int64_t(opt.spec.params[i].numel());
        f.push_back({p.get() + o, g.get() + o, m.get() + o, adam ? v.get() + o : nullptr, n, 0, n});
      }
      return f;
    };
    const cuda::FragmentTable adam_table(frags(true), true), lion_table(frags(false), false);
    int64_t step = 0;
    const optim::AdamHyper ah = optim::AdamHyper::adamw();
    const auto ta = timed([&] { cuda::adam_step(ah, ++step, adam_table, s); });
    const optim::LionHyper lh;
    const auto tl = timed([&] { cuda::lion_step(lh, lion_table, s); });
    std::vector<cuda::GradSpan> spans;
    for (size_t i = 0; i < offsets.size(); ++i) spans.push_back({g.get() + offsets[i], int64_t(opt.spec.params[i].numel())});
    const cuda::GradSpanTable gt(spans);
    const auto tn = timed([&] { cuda::scale_max_and_squares(gt, 1.0f, 0.0f, s); });
    bool halve = true;  // ÷2 then ÷0.5: the grads keep their magnitude over the repetitions
    const auto td = timed([&] {
      cuda::scale_max_and_squares(gt, halve ? 2.0f : 0.5f, 0.0f, s);
      halve = !halve;
    });
    const auto tm = timed([&] { cuda::max_abs(gt, 0.0f, s); });
    const int exponent = pipeline::norm_exponent(cuda::max_abs(gt, 0.0f, s));
    const auto tq = timed([&] { cuda::scaled_squares(gt, exponent, s); });
    struct Measured {
      const char* name;
      Timing t;
      int bytes_per_element;
    };
    for (const Measured& x : {Measured{"adamw", ta, 28}, Measured{"lion", tl, 20}, Measured{"grad-norm", tn, 8},
                              Measured{"grad-norm-div", td, 12}, Measured{"grad-max", tm, 4},
                              Measured{"grad-sq", tq, 4}}) {
      const auto& t = x.t;
      GpuTimedRow r = make_row(x.name, "", 0, elements, uint64_t(elements) * x.bytes_per_element, t);
      r.gbps = r.bytes / (t.median * 1e-3) / 1e9;
      r.ratio_to_copy = r.gbps / copy_gbps;
      res.rows.push_back(r);
    }
  }

  // Muon: each listed matrix alone, then the model's matrices as one group per shape.
  const optim::MuonHyper mh;
  const auto muon_row = [&](const std::string& label, const std::vector<std::pair<int64_t, int64_t>>& shapes) {
    std::map<std::pair<int64_t, int64_t>, int64_t> count;
    for (const auto& sh : shapes) ++count[sh];
    std::vector<std::unique_ptr<DevFloats>> bufs;
    std::vector<cuda::MuonGroup> groups;
    double flops = 0;
    int64_t n_el = 0;
    for (const auto& [sh, k] : count) {
      const int64_t n = sh.first * sh.second;
      bufs.push_back(std::make_unique<DevFloats>(size_t(k * n), 0.02f, 7));
      bufs.push_back(std::make_unique<DevFloats>(size_t(k * n), 1e-3f, 8));
      bufs.push_back(std::make_unique<DevFloats>(size_t(k * n), 0.0f, 9));
      float *pp = bufs[bufs.size() - 3]->get(), *gg = bufs[bufs.size() - 2]->get(), *mm = bufs.back()->get();
      std::vector<cuda::MuonMatrix> mats;
      for (int64_t z = 0; z < k; ++z) mats.push_back({pp + z * n, gg + z * n, mm + z * n});
      groups.emplace_back(sh.first, sh.second, mats);
      flops += k * ns_flops(sh.first, sh.second, mh.ns.steps);
      n_el += k * n;
    }
    const auto t = timed([&] {
      for (auto& grp : groups) grp.step(mh, blas, s);
    });
    GpuTimedRow r = make_row("muon", label, int64_t(shapes.size()), n_el, 0, t);
    r.tflops = flops / (t.median * 1e-3) / 1e12;
    bool lt = true;
    for (const auto& grp : groups) lt = lt && grp.workspace().uses_lt();
    r.gemm = lt ? "cublasLt" : "gemmex+copy";
    res.rows.push_back(r);
  };
  for (const auto& sh : opt.muon_shapes) muon_row(std::to_string(sh.first) + "x" + std::to_string(sh.second), {sh});
  if (!res.model_muon_shapes.empty()) muon_row("model", res.model_muon_shapes);

  cublasDestroy(blas);
  cudaStreamDestroy(s);
  return res;
}

#endif

}  // namespace fpg::bench
