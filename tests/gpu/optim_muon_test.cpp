// Newton–Schulz and Muon on cuBLAS against the CPU. Not bitwise: the GEMMs sum in another order than
// OpenBLAS, and bf16 rounding of the products then diverges. Tolerances are the CPU's own budgets
// (tests/unit/optim_muon_test.cpp): NS within 3% relative Frobenius of the fp64
// polynomial and of the CPU bf16 emulation; the Muon update within 5% of the CPU's. What IS elementwise
// is bitwise: the momentum buffer, and a zero-gradient step (pure decay).
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "catch.h"
#include "core/float_codec.h"
#include "kernels/muon.h"
#include "kernels/newton_schulz.h"
#include "optim/muon.h"
#include "optim_device_util.h"

using fpg_gpu_test::Dev;
using fpg_gpu_test::mismatches;
namespace optim = fpg::optim;

namespace {

struct Blas {
  cublasHandle_t h = nullptr;
  Blas() { FPG_CUBLAS_CHECK(cublasCreate(&h)); }
  ~Blas() { cublasDestroy(h); }
};

std::vector<float> gaussian(int64_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

template <typename A, typename B>
double rel_frobenius(const A& a, const B& ref, int64_t off, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = off; i < off + n; ++i) {
    const double d = double(a[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("GPU Newton-Schulz is within the bf16 budget of the fp64 polynomial and of the CPU", "[gpu][muon]") {
  Blas blas;
  const optim::NsOptions opt;  // bf16, 5 steps, torch's coefficients
  double worst64 = 0, worstcpu = 0;
  for (const auto& shape : {std::pair<int64_t, int64_t>{48, 160}, {160, 48}, {33, 77}, {1, 9}, {256, 256}, {300, 1000}}) {
    const int64_t r = shape.first, c = shape.second, n = r * c, batch = 3;
    const std::vector<float> u = gaussian(batch * n, uint64_t(r * 1000 + c));
    Dev<float> din(u), dout(std::vector<float>(batch * n));
    fpg::cuda::NsWorkspace ws(batch, r, c);
    fpg::cuda::newton_schulz(din.get(), opt, dout.get(), ws, blas.h, nullptr);
    FPG_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("GPU Newton-Schulz %lld x %lld x %lld: %s\n", (long long)batch, (long long)r, (long long)c,
                ws.uses_lt() ? "cublasLt" : "gemmex+copy");
    const std::vector<float> o = dout.host();
    for (int64_t z = 0; z < batch; ++z) {
      std::vector<double> u64(u.begin() + z * n, u.begin() + (z + 1) * n), o64(n);
      optim::newton_schulz_fp64(u64.data(), r, c, opt, o64.data());
      std::vector<float> cpu(n);
      optim::newton_schulz(u.data() + z * n, r, c, opt, cpu.data());
      std::vector<double> o64_full(batch * n), cpu_full(batch * n);
      std::copy(o64.begin(), o64.end(), o64_full.begin() + z * n);
      std::copy(cpu.begin(), cpu.end(), cpu_full.begin() + z * n);
      const double e64 = rel_frobenius(o, o64_full, z * n, n), ecpu = rel_frobenius(o, cpu_full, z * n, n);
      INFO(r << " x " << c << " matrix " << z << ": vs fp64 " << e64 << ", vs CPU bf16 " << ecpu);
      CHECK(e64 < 0.03);
      CHECK(ecpu < 0.03);
      worst64 = std::max(worst64, e64);
      worstcpu = std::max(worstcpu, ecpu);
    }
    bool bf16_valued = true;
    for (float x : o) bf16_valued = bf16_valued && fpg::float_from_bf16(fpg::bf16_from_float(x)) == x;
    CHECK(bf16_valued);
  }
  std::printf("GPU Newton-Schulz, worst relative Frobenius error: vs fp64 %.4f, vs CPU bf16 %.4f\n", worst64,
              worstcpu);
}

TEST_CASE("GPU Newton-Schulz of a tall matrix is the transpose of its wide one, bitwise, and zeros stay zero",
          "[gpu][muon]") {
  Blas blas;
  const optim::NsOptions opt;
  const int64_t r = 96, c = 40, n = r * c;
  const std::vector<float> u = gaussian(n, 3);
  std::vector<float> ut(n);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) ut[j * r + i] = u[i * c + j];
  Dev<float> a(u), b(ut);
  fpg::cuda::NsWorkspace wa(1, r, c), wb(1, c, r);
  fpg::cuda::newton_schulz(a.get(), opt, a.get(), wa, blas.h, nullptr);  // in place
  fpg::cuda::newton_schulz(b.get(), opt, b.get(), wb, blas.h, nullptr);
  const std::vector<float> oa = a.host(), ob = b.host();
  size_t bad = 0;
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) bad += fpg_gpu_test::bits(oa[i * c + j]) != fpg_gpu_test::bits(ob[j * r + i]);
  CHECK(bad == 0);
  Dev<float> z(std::vector<float>(n, 0.0f));
  fpg::cuda::newton_schulz(z.get(), opt, z.get(), wa, blas.h, nullptr);
  for (float x : z.host()) REQUIRE(x == 0.0f);
  optim::NsOptions fp32 = opt;
  fp32.precision = optim::NsPrecision::fp32;
  REQUIRE_THROWS_AS(fpg::cuda::newton_schulz(a.get(), fp32, a.get(), wa, blas.h, nullptr), fpg::UsageError);
}

TEST_CASE("GPU Muon: momentum bitwise, update within 5% of the CPU over 5 steps, batched", "[gpu][muon]") {
  Blas blas;
  double worst = 0;
  for (const auto& shape : {std::pair<int64_t, int64_t>{64, 200}, {200, 64}, {129, 129}}) {
    for (const bool nesterov : {true, false}) {
      const int64_t r = shape.first, c = shape.second, n = r * c, batch = 4;
      optim::MuonHyper h;
      h.lr = 0.02;
      h.nesterov = nesterov;
      h.adjust_lr = nesterov ? optim::MuonLrAdjust::original : optim::MuonLrAdjust::match_rms_adamw;
      std::vector<float> p = gaussian(batch * n, 77, 0.05f), buf(batch * n, 0.0f);
      const std::vector<float> p0 = p;
      Dev<float> dp(p), dg(std::vector<float>(batch * n)), dbuf(buf);
      std::vector<fpg::cuda::MuonMatrix> mats;
      for (int64_t z = 0; z < batch; ++z) mats.push_back({dp.get() + z * n, dg.get() + z * n, dbuf.get() + z * n});
      fpg::cuda::MuonGroup group(r, c, mats);
      CHECK(group.size() == size_t(batch));
      for (int step = 1; step <= 5; ++step) {
        const std::vector<float> g = gaussian(batch * n, 1000 + step + r, 0.01f);
        FPG_CUDA_CHECK(cudaMemcpy(dg.get(), g.data(), g.size() * 4, cudaMemcpyHostToDevice));
        for (int64_t z = 0; z < batch; ++z) optim::muon_step(h, p.data() + z * n, g.data() + z * n, buf.data() + z * n, r, c);
        group.step(h, blas.h, nullptr);
        FPG_CUDA_CHECK(cudaDeviceSynchronize());
        INFO(r << " x " << c << (nesterov ? " nesterov" : "") << " step " << step);
        CHECK(mismatches(dbuf.host(), buf) == 0);
      }
      const std::vector<float> pg = dp.host();
      std::vector<double> dgpu(batch * n), dcpu(batch * n);
      for (int64_t i = 0; i < batch * n; ++i) dgpu[i] = double(pg[i]) - p0[i], dcpu[i] = double(p[i]) - p0[i];
      for (int64_t z = 0; z < batch; ++z) {
        const double e = rel_frobenius(dgpu, dcpu, z * n, n);
        INFO(r << " x " << c << " matrix " << z << ": update vs CPU " << e);
        CHECK(e < 0.05);
        worst = std::max(worst, e);
      }
    }
  }
  std::printf("GPU Muon, worst relative Frobenius error of the 5-step update vs the CPU: %.4f\n", worst);
}

TEST_CASE("GPU Muon with zero gradients only decays the parameters, bitwise as the CPU", "[gpu][muon]") {
  Blas blas;
  const int64_t r = 50, c = 70, n = r * c;
  optim::MuonHyper h;
  h.lr = 0.05;
  std::vector<float> p = gaussian(n, 8), buf(n, 0.0f);
  const std::vector<float> g(n, 0.0f);
  Dev<float> dp(p), dg(g), dbuf(buf);
  fpg::cuda::MuonGroup group(r, c, {{dp.get(), dg.get(), dbuf.get()}});
  group.step(h, blas.h, nullptr);
  optim::muon_step(h, p.data(), g.data(), buf.data(), r, c);
  CHECK(mismatches(dp.host(), p) == 0);
  optim::MuonHyper id = h;
  id.orthogonalizer = optim::MuonOrthogonalizer::identity;
  REQUIRE_THROWS_AS(group.step(id, blas.h, nullptr), fpg::UsageError);
}
