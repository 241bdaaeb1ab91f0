#include "optim/newton_schulz.h"

#include "core/blas.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_codec.h"

namespace fpg::optim {
namespace {

float round_bf16(float x) { return float_from_bf16(bf16_from_float(x)); }

void check_args(int64_t rows, int64_t cols, const NsOptions& opt, const char* who) {
  if (rows < 0 || cols < 0)
    throw UsageError(std::string(who) + ": negative matrix size");
  if (opt.steps < 0 || opt.steps >= 100)
    throw UsageError(std::string(who) + ": steps must be in [0, 100), as torch requires");
}

// dst (c × r) = srcᵀ for src r × c, row-major.
template <typename T>
void transpose(const T* src, int64_t r, int64_t c, T* dst) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) dst[j * r + i] = src[i * c + j];
}

}  // namespace

void newton_schulz(const float* in, int64_t rows, int64_t cols, const NsOptions& opt, float* out) {
  check_args(rows, cols, opt, "newton_schulz");
  const int64_t size = rows * cols;
  if (size == 0) return;
  const bool bf16 = opt.precision == NsPrecision::bf16;
  const auto rnd = [bf16](float x) { return bf16 ? round_bf16(x) : x; };
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;  // X is m × n, m <= n

  // X = U (bf16), wide orientation.
  std::vector<float> x(size), xn(size), s(m * m), bm(m * m);
  if (tall) {
    transpose(in, rows, cols, x.data());
  } else {
    std::copy(in, in + size, x.begin());
  }
  for (float& v : x) v = rnd(v);

  // X /= max(‖X‖_F, eps): the norm of a bf16 tensor is returned as bf16, the clamp keeps that dtype,
  // the division runs in fp32 and rounds back.
  double ss = 0.0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const float eps = static_cast<float>(opt.eps);
  const float norm = rnd(std::max(rnd(static_cast<float>(std::sqrt(ss))), eps));
  for (float& v : x) v = rnd(v / norm);

  const float a = static_cast<float>(opt.coeff.a), b = static_cast<float>(opt.coeff.b),
              c = static_cast<float>(opt.coeff.c);
  const int M = static_cast<int>(m), N = static_cast<int>(n);
  for (int it = 0; it < opt.steps; ++it) {
    // S = X Xᵀ
    blas::sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, N, 1.0f, x.data(), N, x.data(), N, 0.0f,
                s.data(), M);
    for (float& v : s) v = rnd(v);
    // Bm = b·S + c·S·S (one addmm: one rounding)
    std::copy(s.begin(), s.end(), bm.begin());
    blas::sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, M, M, c, s.data(), M, s.data(), M, b,
                bm.data(), M);
    for (float& v : bm) v = rnd(v);
    // X = a·X + Bm·X
    std::copy(x.begin(), x.end(), xn.begin());
    blas::sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, M, 1.0f, bm.data(), M, x.data(), N, a,
                xn.data(), N);
    for (float& v : xn) v = rnd(v);
    x.swap(xn);
  }

  if (tall) {
    transpose(x.data(), m, n, out);
  } else {
    std::copy(x.begin(), x.end(), out);
  }
}

void newton_schulz_fp64(const double* in, int64_t rows, int64_t cols, const NsOptions& opt, double* out) {
  check_args(rows, cols, opt, "newton_schulz_fp64");
  const int64_t size = rows * cols;
  if (size == 0) return;
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  std::vector<double> x(size), xn(size), s(m * m), bm(m * m);
  if (tall) {
    transpose(in, rows, cols, x.data());
  } else {
    std::copy(in, in + size, x.begin());
  }
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double norm = std::max(std::sqrt(ss), opt.eps);
  for (double& v : x) v /= norm;
  const int M = static_cast<int>(m), N = static_cast<int>(n);
  for (int it = 0; it < opt.steps; ++it) {
    blas::dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, N, 1.0, x.data(), N, x.data(), N, 0.0,
                s.data(), M);
    std::copy(s.begin(), s.end(), bm.begin());
    blas::dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, M, M, opt.coeff.c, s.data(), M, s.data(), M,
                opt.coeff.b, bm.data(), M);
    std::copy(x.begin(), x.end(), xn.begin());
    blas::dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, M, 1.0, bm.data(), M, x.data(), N,
                opt.coeff.a, xn.data(), N);
    x.swap(xn);
  }
  if (tall) {
    transpose(x.data(), m, n, out);
  } else {
    std::copy(x.begin(), x.end(), out);
  }
}

}  // namespace fpg::optim
