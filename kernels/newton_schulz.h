// Newton–Schulz orthogonalization on cuBLAS (lib/optim/newton_schulz.h is the CPU reference), batched
// over same-shape matrices: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F), every GEMM's
// epilogue alpha·AB + beta·C rounded to bf16 once, as the CPU's bf16 emulation rounds an addmm:
//   X ← bf16(U) (transposed when rows > cols), X ← bf16(X / bf16(max(bf16(‖X‖_F), eps)))
//   S ← X·Xᵀ;  Bm ← c·S·S + b·S (beta accumulate);  X ← Bm·X + a·X (beta accumulate)
// with strided-batched GEMMs, one per product for the whole batch. Not bitwise equal to the CPU (the
// GEMMs' summation order differs); tests/gpu/optim_muon_test.cpp holds it to the CPU's fp64 budget.
// Include from plain C++.
#pragma once

#include <cstdint>
#include <memory>

#include "optim/newton_schulz.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct cublasContext;
using cublasHandle_t = cublasContext*;

namespace fpg::cuda {

// Device scratch for NS over `batch` rows × cols matrices: two bf16 copies of X, S and Bm
// (2·batch·(2·m·n + 2·m²) bytes, m = min(rows, cols)) and the norm's partial sums.
class NsWorkspace {
 public:
  NsWorkspace(int64_t batch, int64_t rows, int64_t cols);
  ~NsWorkspace();
  NsWorkspace(NsWorkspace&&) noexcept;
  NsWorkspace& operator=(NsWorkspace&&) noexcept;
  int64_t batch() const;
  int64_t rows() const;
  int64_t cols() const;
  size_t bytes() const;
  // True when the GEMMs run through cuBLASLt with separate C and D (no copies); false: the
  // cublasGemmStridedBatchedEx fallback, which copies C into D first.
  bool uses_lt() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// NS of ws.batch() contiguous row-major rows × cols fp32 matrices `in` (device) into `out` (device,
// bf16-valued fp32; may alias `in`). Only NsPrecision::bf16 (UsageError otherwise). Asynchronous.
void newton_schulz(const float* in, const optim::NsOptions& opt, float* out, NsWorkspace& ws, cublasHandle_t blas,
                   cudaStream_t stream);

}  // namespace fpg::cuda
