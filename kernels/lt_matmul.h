// Row-major bf16 GEMMs on tensor cores through cuBLASLt, as the built-in network's `--compute bf16`
// runs them (lib/pipeline/device/device_network_bf16.h):
//
//   D[m, n] = op(A)[m, k] · op(B)[k, n] + beta·C      A, B bf16; C, D fp32 or bf16 (both the same)
//
// summed in fp32 (CUBLAS_COMPUTE_32F, fp32 alpha/beta), D rounded once to its type in the epilogue.
// C may be D (accumulate in place) or another array of D's shape (the residual h_{l+1} = h_l + x·Wᵀ
// without a copy). Row-major arrays: a stored [r, c] with leading dimension ld (≥ c) is cuBLAS's
// column-major [c, r], so each call runs Dᵀ = op(B)ᵀ·op(A)ᵀ with A and B swapped.
//
// Plans: the first call of a shape (ops, sizes, leading dimensions, output type, beta ≠ 0 and the
// pointers' alignments) asks cuBLASLt's heuristic for its best algorithm within a 32 MiB workspace
// (a split-K reduction of a bf16 output adding its partial sums in fp32) and keeps it; later calls of that shape reuse it, so a run's algorithms, and its bits, never change. A
// shape cuBLASLt has no algorithm for runs on cublasGemmEx with the same types (counted in stats()).
// Every cuBLAS status is checked (InternalError naming the call). One instance per stream user: it
// owns its handles and workspace on the device current at construction. Plain C++ header.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/stream.h"

namespace fpg::cuda {

enum class LtOut : uint8_t { f32, bf16 };

struct LtStats {
  uint64_t plans = 0;      // shapes planned on cuBLASLt
  uint64_t fallbacks = 0;  // shapes run on cublasGemmEx (no cuBLASLt algorithm)
  uint64_t calls = 0;
};

class LtMatmul {
 public:
  static constexpr int kMaxAlgoRank = 15;
  // algo_rank: 0, the heuristic's best algorithm (what the network runs); k > 0 its k-th choice
  // (the last it offers where fewer), for benchmarks that compare them.
  explicit LtMatmul(cudaStream_t stream, int algo_rank = 0);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  void set_stream(cudaStream_t stream);

  // D = op(A)·op(B) + beta·C as above; ta / tb: A / B stored transposed (A [k, m], B [n, k]).
  // lda, ldb, ldd: leading dimensions (row strides) of the stored arrays; C has D's. beta 0: C unread.
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
            int64_t ldb, float beta, const void* c, void* d, int64_t ldd, LtOut out);

  const LtStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fpg::cuda
