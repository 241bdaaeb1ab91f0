// Newton–Schulz orthogonalization as torch.optim.Muon (torch 2.11, `_zeropower_via_newtonschulz`) runs
// it: X ← U/max(‖U‖_F, eps) on the wide orientation (transposed when rows > cols), then `steps` times
//   S ← X·Xᵀ;  Bm ← addmm(S, S, S, beta=b, alpha=c) = b·S + c·S·S;  X ← addmm(X, Bm, X, beta=a) = a·X + Bm·X
// with the quintic coefficients (3.4445, −4.7750, 2.0315). The result is roughly U·Vᵀ with singular values
// in ~[0.5, 1.5], not the exact polar factor (Keller Jordan's Muon, `zeropower_via_newtonschulz5`).
//
// NsPrecision::bf16 emulates torch's bf16 matmuls: every operand is bf16, each GEMM accumulates in fp32
// (cblas_sgemm on bf16-valued fp32 arrays) and its epilogue (alpha·AB + beta·C) is rounded to bf16 once,
// as an addmm is. The norm is rounded to bf16 (torch's norm of a bf16 tensor) and the division done in
// fp32 then rounded. Accumulation order differs from torch's kernels, so results agree with torch to
// ~0.5% relative Frobenius, not bitwise. NsPrecision::fp32 is the same iteration with fp32 operands.
// newton_schulz_fp64 is the double-precision reference of the same polynomial (tests).
#pragma once

#include <cstdint>

namespace fpg::optim {

struct NsCoefficients {
  double a = 3.4445;
  double b = -4.7750;
  double c = 2.0315;
};

enum class NsPrecision { bf16, fp32 };

struct NsOptions {
  int steps = 5;
  NsCoefficients coeff;
  double eps = 1e-7;  // the norm is clamped to at least eps (torch), not incremented by it (KJ)
  NsPrecision precision = NsPrecision::bf16;
};

// in and out: rows × cols, row-major fp32 (out is bf16-valued for NsPrecision::bf16); they may alias.
void newton_schulz(const float* in, int64_t rows, int64_t cols, const NsOptions& opt, float* out);

// The same iteration in double with no intermediate rounding (opt.precision is ignored).
void newton_schulz_fp64(const double* in, int64_t rows, int64_t cols, const NsOptions& opt, double* out);

}  // namespace fpg::optim
