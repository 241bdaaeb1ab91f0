// `--compute bf16` on the GPU:
//   - kernels/lt_matmul.h: every layout the network uses (x·Wᵀ, dyᵀ·x, dy·W), fp32 and bf16 outputs,
//     beta 0, beta 1 in place and beta 1 onto another array, odd and aligned shapes, against a double
//     GEMM of the same bf16 inputs (fp32 outputs within 1e-5 of the largest output: only the fp32
//     sum's rounding differs; bf16 outputs within one rounding to bf16 of it: bf16 carries 8
//     significant bits, so at most 2^-8 relative, plus the fp32 sum's error);
//   - pipeline/device/device_network_bf16.h against the CPU's Compute::bf16 NetworkCompute: outputs,
//     loss and every gradient within kTol = 1e-2 of the array's largest magnitude (the GEMMs add in
//     another order, so now and then a bf16 rounding of an activation lands on the other side), and
//     closer to the CPU's bf16 than to the CPU's fp32 math (the GPU rounds where the reference does);
//   - accumulate = overwrite + add (within the fp32 sums' rounding: the weight GEMMs add in the
//     epilogue), two runs give the same bits, and the bf16 micro-batches' targets are the CPU bf16
//     teacher's.
// The largest differences are printed (the device logs keep them).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "catch.h"
#include "core/float_codec.h"
#include "kernels/cuda_check.h"
#include "kernels/lt_matmul.h"
#include "model/compute_mode.h"
#include "model/network_compute.h"
#include "model/network_init.h"
#include "model/presets.h"
#include "model/teacher_task.h"
#include "device_network_util.h"
#include "pipeline/device/device_micro_batch.h"
#include "pipeline/device/device_network_bf16.h"

using namespace fpg_gpu_test;
namespace model = fpg::model;

namespace {

constexpr double kTol = 1e-2;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = fpg::bf16_from_float(v[i]);
  return b;
}

std::vector<float> from_bf16(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = fpg::float_from_bf16(b[i]);
  return v;
}

// ---- LtMatmul ----

// Row-major D = op(A)·op(B) + beta·C in double from bf16 inputs.
std::vector<double> ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const std::vector<float>& a,
                             const std::vector<float>& b, float beta, const std::vector<float>& c) {
  std::vector<double> d(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) {
        const double x = ta ? a[size_t(q * m + i)] : a[size_t(i * k + q)];
        const double y = tb ? b[size_t(j * k + q)] : b[size_t(q * n + j)];
        s += x * y;
      }
      d[size_t(i * n + j)] = s + (beta != 0.0f ? double(beta) * c[size_t(i * n + j)] : 0.0);
    }
  return d;
}

struct GemmShape {
  bool ta, tb;
  int64_t m, n, k;
};

}  // namespace

TEST_CASE("LtMatmul: the network's GEMM layouts against a double GEMM of the bf16 inputs", "[device-network][bf16]") {
  Stream stream;
  fpg::cuda::LtMatmul mm(stream.s);
  const GemmShape shapes[] = {
      {false, true, 7, 33, 50},  {true, false, 33, 50, 7},  {false, false, 7, 50, 33},  // odd: forward, wgrad, dgrad
      {false, true, 32, 256, 128}, {true, false, 256, 128, 32}, {false, false, 32, 128, 256},  // aligned
      {false, false, 32, 64, 4096},  // a long k (split-K territory)
  };
  double worst32 = 0, worst16 = 0;
  uint32_t seed = 1;
  for (const GemmShape& s : shapes) {
    const std::vector<float> a = from_bf16(to_bf16(normals(size_t(s.m * s.k), seed++)));
    const std::vector<float> b = from_bf16(to_bf16(normals(size_t(s.k * s.n), seed++)));
    const std::vector<float> c = normals(size_t(s.m * s.n), seed++);
    Dev<uint16_t> da(to_bf16(a)), db(to_bf16(b));
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    for (float beta : {0.0f, 1.0f}) {
      const std::vector<double> want = ref_gemm(s.ta, s.tb, s.m, s.n, s.k, a, b, beta, c);
      double scale = 0;  // the fp32 sums' errors scale with the largest output
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (bool in_place : {true, false}) {
        if (beta == 0.0f && !in_place) continue;
        INFO("ta " << s.ta << " tb " << s.tb << " m " << s.m << " n " << s.n << " k " << s.k << " beta " << beta
                   << " in place " << in_place);
        // fp32 output.
        Dev<float> dc(c), dd(in_place ? c : std::vector<float>(c.size(), 0.0f));
        settle();
        mm.gemm(s.ta, s.tb, s.m, s.n, s.k, da.get(), lda, db.get(), ldb, beta, in_place ? dd.get() : dc.get(),
                dd.get(), s.n, fpg::cuda::LtOut::f32);
        stream.sync();
        const std::vector<float> got = dd.host();
        double err = 0;
        for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]) / scale);
        CHECK(err <= 1e-5);
        worst32 = std::max(worst32, err);
        if (!in_place) CHECK(mismatches(dc.host(), c) == 0);  // C is read, never written
        // bf16 output (beta 0 only: the network never accumulates into bf16).
        if (beta != 0.0f) continue;
        Dev<uint16_t> d16(std::vector<uint16_t>(got.size(), 0));
        settle();
        mm.gemm(s.ta, s.tb, s.m, s.n, s.k, da.get(), lda, db.get(), ldb, 0.0f, nullptr, d16.get(), s.n,
                fpg::cuda::LtOut::bf16);
        stream.sync();
        const std::vector<float> got16 = from_bf16(d16.host());
        double err16 = 0;  // relative to the output, beyond the fp32 sum's own error (1e-5 of scale)
        for (size_t i = 0; i < got16.size(); ++i)
          if (std::fabs(want[i]) > 1e-2 * scale)
            err16 = std::max(err16, (std::fabs(got16[i] - want[i]) - 1e-5 * scale) / std::fabs(want[i]));
        CHECK(err16 <= 0x1p-8 * 1.001);  // bf16's unit roundoff: rounded once, to nearest
        worst16 = std::max(worst16, err16);
        std::printf("[bf16] LtMatmul %s%s m %lld n %lld k %lld: fp32 %.3g of scale, bf16 %.4g relative\n",
                    s.ta ? "T" : "N", s.tb ? "T" : "N", (long long)s.m, (long long)s.n, (long long)s.k, err, err16);
      }
    }
  }
  std::printf("[bf16] LtMatmul: fp32 outputs within %.3g of scale, bf16 outputs within %.3g relative; "
              "%llu cuBLASLt plans, %llu cublasGemmEx fallbacks\n",
              worst32, worst16, static_cast<unsigned long long>(mm.stats().plans),
              static_cast<unsigned long long>(mm.stats().fallbacks));
}

namespace {

// ---- DeviceNetworkBf16 ----

// Params (fp32 host values: the teacher's init, not bf16-exact) and a batch; the device holds them
// rounded to bf16, as the pipeline's bf16 buffers.
struct Case {
  model::NetworkDims dims;
  int64_t batch;
  std::vector<std::vector<float>> params;
  std::vector<std::unique_ptr<Dev<uint16_t>>> dparams;
  std::vector<float> x, target;
  std::unique_ptr<Dev<float>> dx, dtarget;

  Case(const model::NetworkDims& d, int64_t b, uint32_t seed) : dims(d), batch(b) {
    params = model::init_network_params(model::network_spec("case", d), seed, model::NetworkRole::teacher);
    for (const auto& p : params) dparams.push_back(std::make_unique<Dev<uint16_t>>(to_bf16(p)));
    x = normals(uint64_t(b) * d.input, seed + 1);
    target = normals(uint64_t(b) * d.output, seed + 2);
    dx = std::make_unique<Dev<float>>(x);
    dtarget = std::make_unique<Dev<float>>(target);
    settle();
  }
  std::vector<const uint16_t*> device_params() const {
    std::vector<const uint16_t*> p;
    for (const auto& d : dparams) p.push_back(d->get());
    return p;
  }
};

// The awkward shapes (odd widths: unaligned rows, cuBLASLt's small-alignment kernels or the
// fallback) and one of the real presets' kind (multiples of 64, micro-batch 32).
const Shape kShapes[] = {
    kAwkwardShapes[0], kAwkwardShapes[1], kAwkwardShapes[2],
    {{256, 512, 1024, 3, 256}, 32},
};

}  // namespace

TEST_CASE("device bf16 network matches the CPU's bf16 NetworkCompute", "[device-network][bf16]") {
  Stream stream;
  for (const Shape& shape : kShapes) {
    Case c(shape.dims, shape.batch, 7);
    model::NetworkCompute cpu16(c.dims, model::Compute::bf16), cpu32(c.dims);
    fpg::device::DeviceNetworkBf16 gpu(c.dims, stream.s);
    REQUIRE(gpu.param_count() == cpu16.param_count());
    const auto cpu_params = model::const_pointers(c.params);
    std::vector<std::vector<float>> rounded = c.params;  // what the fp32 math gets: the same bf16 params
    for (auto& p : rounded)
      for (float& v : p) v = model::round_to_bf16(v);
    const auto cpu_rounded = model::const_pointers(rounded);
    INFO("dims " << c.dims.input << "/" << c.dims.hidden << "/" << c.dims.ffn << "/" << c.dims.layers << "/"
                 << c.dims.output << " batch " << c.batch);

    std::vector<float> y16(uint64_t(c.batch) * c.dims.output), y32(y16.size());
    cpu16.forward(cpu_params, c.x.data(), c.batch, y16.data());
    cpu32.forward(cpu_rounded, c.x.data(), c.batch, y32.data());
    Dev<float> y_dev(std::vector<float>(y16.size(), 0.0f));
    gpu.forward(c.device_params(), c.dx->get(), c.batch, y_dev.get());
    Dev<float> loss_dev(std::vector<float>(2, 0.0f));
    settle();
    gpu.loss(c.device_params(), c.dx->get(), c.dtarget->get(), c.batch, loss_dev.get());
    stream.sync();
    const std::vector<float> y = y_dev.host();
    const double ey16 = rel_error(y, y16), ey32 = rel_error(y, y32);
    CHECK(ey16 <= kTol);
    const float loss16 = cpu16.loss(cpu_params, c.x.data(), c.target.data(), c.batch);
    const float loss_gpu = read_float(loss_dev.get());
    CHECK(std::fabs(loss_gpu - loss16) <= kTol * loss16);

    std::vector<std::vector<float>> g16, g32;
    for (const auto& p : c.params) g16.emplace_back(p.size(), 0.0f), g32.emplace_back(p.size(), 0.0f);
    const float fb16 = cpu16.forward_backward(cpu_params, c.x.data(), c.target.data(), c.batch, model::pointers(g16),
                                              model::GradMode::overwrite);
    cpu32.forward_backward(cpu_rounded, c.x.data(), c.target.data(), c.batch, model::pointers(g32),
                           model::GradMode::overwrite);
    Grads g(c.params);
    settle();
    gpu.forward_backward(c.device_params(), c.dx->get(), c.dtarget->get(), c.batch, g.ptrs(),
                         model::GradMode::overwrite, loss_dev.get() + 1);
    stream.sync();
    CHECK(std::fabs(read_float(loss_dev.get() + 1) - fb16) <= kTol * fb16);
    const auto gg = g.host();
    double worst16 = 0, worst32 = 0, sum16 = 0, sum32 = 0;
    for (size_t i = 0; i < gg.size(); ++i) {
      const double e16 = rel_error(gg[i], g16[i]), e32 = rel_error(gg[i], g32[i]);
      INFO("param " << i << ": " << e16 << " of max|g| from the CPU's bf16, " << e32 << " from its fp32");
      CHECK(e16 <= kTol);
      worst16 = std::max(worst16, e16), worst32 = std::max(worst32, e32);
      sum16 += e16, sum32 += e32;
    }
    // Rounded where the reference rounds: nearer the CPU's bf16 math than its fp32 math, over all arrays.
    CHECK(ey16 <= ey32);
    CHECK(sum16 <= sum32);
    std::printf("[bf16] network %llu/%llu/%llu/%llu/%llu batch %lld: y %.3g (fp32 math %.3g), loss %.7g vs %.7g, "
                "grads worst %.3g (fp32 math %.3g); %llu Lt plans, %llu fallbacks\n",
                (unsigned long long)c.dims.input, (unsigned long long)c.dims.hidden, (unsigned long long)c.dims.ffn,
                (unsigned long long)c.dims.layers, (unsigned long long)c.dims.output, (long long)c.batch, ey16, ey32,
                double(loss_gpu), double(loss16), worst16, worst32, (unsigned long long)gpu.lt_plans(),
                (unsigned long long)gpu.lt_fallbacks());
  }
}

TEST_CASE("device bf16 network: accumulate adds onto the gradient, runs repeat bitwise", "[device-network][bf16]") {
  Stream stream;
  for (const Shape& shape : kShapes) {
    Case c1(shape.dims, shape.batch, 11);
    Case c2(shape.dims, shape.batch, 11);
    c2.x = normals(c2.x.size(), 99);
    c2.target = normals(c2.target.size(), 98);
    c2.dx = std::make_unique<Dev<float>>(c2.x);
    c2.dtarget = std::make_unique<Dev<float>>(c2.target);
    settle();
    std::vector<std::vector<std::vector<float>>> runs;
    for (int run = 0; run < 2; ++run) {  // a fresh instance each run: nothing carried over
      fpg::device::DeviceNetworkBf16 gpu(c1.dims, stream.s);
      Grads first(c1.params), second(c1.params), acc(c1.params);
      settle();
      gpu.forward_backward(c1.device_params(), c1.dx->get(), c1.dtarget->get(), c1.batch, first.ptrs(),
                           model::GradMode::overwrite, nullptr);
      gpu.forward_backward(c1.device_params(), c2.dx->get(), c2.dtarget->get(), c1.batch, second.ptrs(),
                           model::GradMode::overwrite, nullptr);
      gpu.forward_backward(c1.device_params(), c1.dx->get(), c1.dtarget->get(), c1.batch, acc.ptrs(),
                           model::GradMode::overwrite, nullptr);
      gpu.forward_backward(c1.device_params(), c2.dx->get(), c2.dtarget->get(), c1.batch, acc.ptrs(),
                           model::GradMode::accumulate, nullptr);
      stream.sync();
      const auto a = first.host(), b = second.host(), got = acc.host();
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        std::vector<float> want(a[i].size());
        for (size_t k = 0; k < want.size(); ++k) want[k] = a[i][k] + b[i][k];
        INFO("param " << i);
        const double e = rel_error(got[i], want);
        CHECK(e <= 1e-5);  // the epilogue's add vs a separate one; only the fp32 sums' order may differ
        worst = std::max(worst, e);
      }
      if (run == 0) std::printf("[bf16] accumulate vs overwrite + add: worst %.3g of max|g|\n", worst);
      runs.push_back(got);
    }
    for (size_t i = 0; i < runs[0].size(); ++i) CHECK(mismatches(runs[0][i], runs[1][i]) == 0);
  }
}

TEST_CASE("device bf16 micro-batches: inputs bitwise, targets the CPU bf16 teacher's", "[device-network][bf16]") {
  Stream stream;
  const model::NetworkDims dims{37, 50, 33, 2, 19};
  const model::TeacherTask task(dims, 4321, 9);
  model::NetworkCompute cpu(dims, model::Compute::bf16), cpu32(dims);
  fpg::device::DeviceNetworkBf16 gpu(dims, stream.s);
  fpg::device::DeviceMicroBatches batches(task, stream.s, model::Compute::bf16);
  for (uint64_t index : {0ull, 5ull, 123456ull}) {
    batches.draw(index, gpu);
    stream.sync();
    std::vector<float> x(9 * dims.input), t(9 * dims.output);
    FPG_CUDA_CHECK(cudaMemcpy(x.data(), batches.x(), x.size() * sizeof(float), cudaMemcpyDeviceToHost));
    FPG_CUDA_CHECK(cudaMemcpy(t.data(), batches.target(), t.size() * sizeof(float), cudaMemcpyDeviceToHost));
    model::MicroBatch mb, mb32;
    task.draw(index, cpu, mb);
    task.draw(index, cpu32, mb32);
    INFO("micro-batch " << index);
    CHECK(mismatches(x, mb.x) == 0);
    const double e16 = rel_error(t, mb.target), e32 = rel_error(t, mb32.target);
    CHECK(e16 <= kTol);
    CHECK(e16 <= e32);
  }
}

namespace {

// The GEMMs of a step of the presets (rows = micro-batch 32), by role.
struct RoleShape {
  const char* role;
  bool ta, tb;
  int64_t m, n, k;
  fpg::cuda::LtOut out;
  bool beta;
};

std::vector<RoleShape> step_shapes(int64_t in, int64_t h, int64_t f, int64_t out) {
  using fpg::cuda::LtOut;
  const int64_t b = 32;
  return {
      {"fwd input x·Wᵀ", false, true, b, h, in, LtOut::f32, false},
      {"fwd fc1 (bf16 out)", false, true, b, 2 * f, h, LtOut::bf16, false},
      {"fwd fc2 + residual", false, true, b, h, f, LtOut::f32, true},
      {"fwd output", false, true, b, out, h, LtOut::f32, false},
      {"wgrad output dyᵀ·x", true, false, out, h, b, LtOut::f32, false},
      {"dgrad output dy·W", false, false, b, h, out, LtOut::f32, false},
      {"wgrad fc2", true, false, h, f, b, LtOut::f32, false},
      {"dgrad fc2", false, false, b, f, h, LtOut::f32, false},
      {"wgrad fc1", true, false, 2 * f, h, b, LtOut::f32, false},
      {"dgrad fc1", false, false, b, h, 2 * f, LtOut::f32, false},
      {"wgrad input", true, false, h, in, b, LtOut::f32, false},
  };
}

}  // namespace

// Not run by default: `fpgather_gpu_tests "[.lt-shapes]"` prints each GEMM of a base and a 1b step on
// the heuristic's first eight choices (time and the bytes it must move per second), so a slow plan
// shows.
TEST_CASE("LtMatmul timings of the presets' GEMM shapes", "[.lt-shapes]") {
  Stream stream;
  cudaEvent_t e0, e1;
  FPG_CUDA_CHECK(cudaEventCreate(&e0));
  FPG_CUDA_CHECK(cudaEventCreate(&e1));
  struct Preset {
    const char* name;
    int64_t in, h, f, out, layers;
  };
  for (const Preset& p : {Preset{"base", 1024, 768, 2048, 1024, 26}, Preset{"1b", 2048, 2048, 5632, 2048, 29}}) {
    double best_total = 0, first_total = 0;
    for (const RoleShape& r : step_shapes(p.in, p.h, p.f, p.out)) {
      const int64_t a_n = r.m * r.k, b_n = r.k * r.n, d_n = r.m * r.n;
      Dev<uint16_t> a(std::vector<uint16_t>(size_t(a_n), 0x3c00)), b(std::vector<uint16_t>(size_t(b_n), 0x3c00));
      const size_t d_bytes = size_t(d_n) * (r.out == fpg::cuda::LtOut::bf16 ? 2 : 4);
      Dev<uint8_t> c(std::vector<uint8_t>(d_bytes, 0)), d(std::vector<uint8_t>(d_bytes, 0));
      const double bytes = 2.0 * double(a_n + b_n) + double(d_bytes) * (r.beta ? 2 : 1);
      const int64_t lda = r.ta ? r.m : r.k, ldb = r.tb ? r.k : r.n;
      std::printf("[lt-shapes] %-4s %-20s m %6lld n %6lld k %6lld %5.1f MB:", p.name, r.role, (long long)r.m,
                  (long long)r.n, (long long)r.k, bytes / 1e6);
      double best = 1e30, first = 0;
      for (int rank = 0; rank < 8; ++rank) {
        fpg::cuda::LtMatmul mm(stream.s, rank);
        auto run = [&] {
          mm.gemm(r.ta, r.tb, r.m, r.n, r.k, a.get(), lda, b.get(), ldb, r.beta ? 1.0f : 0.0f, c.get(), d.get(), r.n,
                  r.out);
        };
        run();  // plans
        FPG_CUDA_CHECK(cudaEventRecord(e0, stream.s));
        constexpr int kReps = 20;
        for (int i = 0; i < kReps; ++i) run();
        FPG_CUDA_CHECK(cudaEventRecord(e1, stream.s));
        FPG_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        FPG_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = 1e3 * ms / kReps;
        if (rank == 0) first = us;
        best = std::min(best, us);
        std::printf(" %7.1f", us);
      }
      std::printf(" us; heuristic's %.0f GB/s, best %.0f GB/s\n", bytes / first / 1e3, bytes / best / 1e3);
      const int64_t per_step = std::string(r.role).find("input") != std::string::npos ||
                                       std::string(r.role).find("output") != std::string::npos
                                   ? 1
                                   : p.layers;
      const int64_t fwd_twice = std::string(r.role).rfind("fwd", 0) == 0 ? 2 : 1;  // teacher and student
      first_total += first * double(per_step * fwd_twice);
      best_total += best * double(per_step * fwd_twice);
    }
    std::printf("[lt-shapes] %s: a step's GEMMs %.2f ms on the heuristic's choices, %.2f ms on the best of eight\n",
                p.name, first_total / 1e3, best_total / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  CHECK(true);
}

// Draws ahead (DeviceMicroBatches' `next`): the right hint, a wrong one, none; every micro-batch's inputs
// are the CPU's, bitwise, whichever way they were drawn.
TEST_CASE("device micro-batches drawn ahead equal the CPU's", "[device-network][bf16]") {
  Stream stream;
  const model::NetworkDims dims{37, 50, 33, 2, 19};
  const model::TeacherTask task(dims, 4321, 9);
  model::NetworkCompute cpu(dims, model::Compute::bf16);
  fpg::device::DeviceNetworkBf16 gpu(dims, stream.s);
  fpg::device::DeviceMicroBatches batches(task, stream.s, model::Compute::bf16);
  const uint64_t none = fpg::device::DeviceMicroBatches::kNoNext;
  struct Draw {
    uint64_t index, next;
  };
  for (const Draw d : {Draw{0, 1}, Draw{1, 2}, Draw{2, 7}, Draw{3, 4}, Draw{4, none}, Draw{9, 10}, Draw{10, 11},
                       Draw{11, none}}) {
    batches.draw(d.index, gpu, d.next);
    stream.sync();
    std::vector<float> x(9 * dims.input), t(9 * dims.output);
    FPG_CUDA_CHECK(cudaMemcpy(x.data(), batches.x(), x.size() * sizeof(float), cudaMemcpyDeviceToHost));
    FPG_CUDA_CHECK(cudaMemcpy(t.data(), batches.target(), t.size() * sizeof(float), cudaMemcpyDeviceToHost));
    model::MicroBatch mb;
    task.draw(d.index, cpu, mb);
    INFO("micro-batch " << d.index << " (next " << d.next << ")");
    CHECK(mismatches(x, mb.x) == 0);
    CHECK(rel_error(t, mb.target) <= kTol);
  }
}
