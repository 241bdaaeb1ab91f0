#include "kernels/lt_matmul.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace fpg::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper

// The largest power of two up to 256 that divides the address (256 for null: an unread C).
uint32_t alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

struct Key {
  bool ta = false, tb = false, beta = false;
  LtOut out = LtOut::f32;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  uint32_t align_a = 0, align_b = 0, align_cd = 0;
  bool operator==(const Key& o) const {
    return ta == o.ta && tb == o.tb && beta == o.beta && out == o.out && m == o.m && n == o.n && k == o.k &&
           lda == o.lda && ldb == o.ldb && ldd == o.ldd && align_a == o.align_a && align_b == o.align_b &&
           align_cd == o.align_cd;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
    mix(uint64_t(k.ta) | uint64_t(k.tb) << 1 | uint64_t(k.beta) << 2 | uint64_t(k.out) << 3);
    for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldd}) mix(uint64_t(v));
    mix(uint64_t(k.align_a) | uint64_t(k.align_b) << 16 | uint64_t(k.align_cd) << 32);
    return size_t(h);
  }
};

// One shape's cuBLASLt descriptors and algorithm (lt false: the shape runs on cublasGemmEx).
struct Plan {
  bool lt = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // cuBLAS's A (our B), B (our A), C = D
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (auto l : {a, b, d})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

cudaDataType_t out_type(LtOut o) { return o == LtOut::bf16 ? CUDA_R_16BF : CUDA_R_32F; }
size_t out_bytes(LtOut o) { return o == LtOut::bf16 ? 2 : 4; }

}  // namespace

struct LtMatmul::Impl {
  cudaStream_t stream = nullptr;
  int algo_rank = 0;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;  // the fallback's, made on first use
  void* workspace = nullptr;
  std::unordered_map<Key, std::unique_ptr<Plan>, KeyHash> plans;
  LtStats stats;

  std::unique_ptr<Plan> make_plan(const Key& k) {
    auto p = std::make_unique<Plan>();
    if (k.k == 0) return p;  // D = beta·C: cublasGemmEx's case
    // Our B is cuBLAS's A: row-major [rows, cols] is column-major [cols, rows], op as stored.
    const int64_t b_rows = k.tb ? k.n : k.k, b_cols = k.tb ? k.k : k.n;
    const int64_t a_rows = k.ta ? k.k : k.m, a_cols = k.ta ? k.m : k.k;
    const cublasOperation_t op_a = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    FPG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    FPG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    FPG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    FPG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    FPG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, uint64_t(b_cols), uint64_t(b_rows), k.ldb));
    FPG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, uint64_t(a_cols), uint64_t(a_rows), k.lda));
    FPG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, out_type(k.out), uint64_t(k.n), uint64_t(k.m), k.ldd));

    cublasLtMatmulPreference_t pref = nullptr;
    FPG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    // cuBLAS's A is our B and its B our A.
    const uint32_t aligns[4] = {k.align_b, k.align_a, k.align_cd, k.align_cd};
    const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
      st = cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &aligns[i], sizeof aligns[i]);
    // A split-K reduction adds the partial sums in fp32, never in a bf16 output's own type (which
    // would round each partial sum).
    const uint32_t schemes = k.out == LtOut::bf16
                                 ? uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
                                 : uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                sizeof schemes);
    cublasLtMatmulHeuristicResult_t results[kMaxAlgoRank + 1]{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->d, p->d, pref, algo_rank + 1, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    // NOT_SUPPORTED: no algorithm for this shape and alignment; anything else is a real failure.
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      throw_cuda("cublasLtMatmulAlgoGetHeuristic", cublasGetStatusString(st), __FILE__, __LINE__);
    // The heuristic's algo_rank-th choice, or its last one where it offers fewer.
    const int pick = std::min(algo_rank, found - 1);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0 && results[pick].state == CUBLAS_STATUS_SUCCESS) {
      p->algo = results[pick].algo;
      p->lt = true;
    }
    return p;
  }

  void fallback(const Key& k, const uint16_t* a, const uint16_t* b, float beta, const void* c, void* d) {
    if (!blas) {
      FPG_CUBLAS_CHECK(cublasCreate(&blas));
      FPG_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
    }
    FPG_CUBLAS_CHECK(cublasSetStream(blas, stream));
    const size_t e = out_bytes(k.out);
    if (beta != 0.0f && c != d)  // GemmEx accumulates in place only
      FPG_CUDA_CHECK(cudaMemcpy2DAsync(d, size_t(k.ldd) * e, c, size_t(k.ldd) * e, size_t(k.n) * e, size_t(k.m),
                                       cudaMemcpyDeviceToDevice, stream));
    const float alpha = 1.0f;
    FPG_CUBLAS_CHECK(cublasGemmEx(blas, k.tb ? CUBLAS_OP_T : CUBLAS_OP_N, k.ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(k.n),
                                  int(k.m), int(k.k), &alpha, b, CUDA_R_16BF, int(k.ldb), a, CUDA_R_16BF, int(k.lda),
                                  &beta, d, out_type(k.out), int(k.ldd), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
};

LtMatmul::LtMatmul(cudaStream_t stream, int algo_rank) : impl_(std::make_unique<Impl>()) {
  if (algo_rank < 0 || algo_rank > kMaxAlgoRank)
    throw UsageError("LtMatmul: algo_rank must be 0.." + std::to_string(kMaxAlgoRank));
  Impl& m = *impl_;
  m.stream = stream;
  m.algo_rank = algo_rank;
  FPG_CUBLAS_CHECK(cublasLtCreate(&m.lt));
  FPG_CUDA_CHECK(cudaMalloc(&m.workspace, kWorkspaceBytes));
}

LtMatmul::~LtMatmul() {
  if (!impl_) return;
  impl_->plans.clear();
  if (impl_->blas) cublasDestroy(impl_->blas);
  if (impl_->lt) cublasLtDestroy(impl_->lt);
  cudaFree(impl_->workspace);  // cudaFree synchronizes: no matmul still uses it
}

void LtMatmul::set_stream(cudaStream_t stream) { impl_->stream = stream; }

const LtStats& LtMatmul::stats() const { return impl_->stats; }

void LtMatmul::gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, float beta, const void* c, void* d, int64_t ldd, LtOut out) {
  if (m <= 0 || n <= 0) return;
  const int64_t a_cols = ta ? m : k, b_cols = tb ? k : n;
  if (k < 0 || lda < a_cols || ldb < b_cols || ldd < n)
    throw InternalError("LtMatmul: bad GEMM shape m " + std::to_string(m) + " n " + std::to_string(n) + " k " +
                        std::to_string(k) + " lda " + std::to_string(lda) + " ldb " + std::to_string(ldb) + " ldd " +
                        std::to_string(ldd));
  for (int64_t v : {m, n, k, lda, ldb, ldd})
    if (v > INT32_MAX) throw UsageError("LtMatmul: a GEMM dimension above 2^31 - 1 (" + std::to_string(v) + ")");
  Impl& im = *impl_;
  Key key;
  key.ta = ta, key.tb = tb, key.beta = beta != 0.0f, key.out = out;
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
  key.align_a = alignment(a), key.align_b = alignment(b);
  key.align_cd = std::min(alignment(d), beta != 0.0f ? alignment(c) : 256u);
  auto it = im.plans.find(key);
  if (it == im.plans.end()) {
    it = im.plans.emplace(key, im.make_plan(key)).first;
    ++(it->second->lt ? im.stats.plans : im.stats.fallbacks);
  }
  ++im.stats.calls;
  const Plan& p = *it->second;
  if (!p.lt) {
    im.fallback(key, a, b, beta, c, d);
    return;
  }
  const float alpha = 1.0f;
  const void* cc = beta != 0.0f ? c : d;
  FPG_CUBLAS_CHECK(cublasLtMatmul(im.lt, p.op, &alpha, b, p.a, a, p.b, &beta, cc, p.d, d, p.d, &p.algo, im.workspace,
                                  kWorkspaceBytes, im.stream));
}

}  // namespace fpg::cuda
