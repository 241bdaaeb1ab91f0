#include "kernels/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include <cublasLt.h>

#include "kernels/newton_schulz_impl.h"

namespace fpg::cuda {

// One batched bf16 GEMM shape for cuBLASLt: D = alpha·op(A)·op(B) + beta·C, column-major.
struct LtGemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~LtGemm() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (auto l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

struct LtPlans {
  cublasLtHandle_t handle = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = size_t(32) << 20;
  LtGemm gram, poly, update;  // S = X·Xᵀ, Bm = c·S·S + b·S, X' = Bm·X + a·X
  ~LtPlans() {
    cudaFree(scratch);
    if (handle) cublasLtDestroy(handle);
  }
};

namespace {

bool lt_layout(cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t ld, int64_t batch) {
  if (cublasLtMatrixLayoutCreate(l, CUDA_R_16BF, uint64_t(rows), uint64_t(cols), ld) != CUBLAS_STATUS_SUCCESS) return false;
  const int32_t count = int32_t(batch);
  const int64_t stride = rows * cols;
  return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride) ==
             CUBLAS_STATUS_SUCCESS;
}

// A plan for op(A)·op(B) with A stored ar × ac, B stored br × bc, C/D cr × cc (column-major, ld = rows).
bool lt_plan(LtPlans& p, LtGemm& g, cublasOperation_t ta, cublasOperation_t tb, int64_t ar, int64_t ac, int64_t br,
             int64_t bc, int64_t cr, int64_t cc, int64_t batch) {
  if (cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
  if (cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) != CUBLAS_STATUS_SUCCESS)
    return false;
  if (!lt_layout(&g.a, ar, ac, ar, batch) || !lt_layout(&g.b, br, bc, br, batch) || !lt_layout(&g.c, cr, cc, cr, batch))
    return false;
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return false;
  const uint64_t ws = p.scratch_bytes;
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  const bool ok = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
                      CUBLAS_STATUS_SUCCESS &&
                  cublasLtMatmulAlgoGetHeuristic(p.handle, g.op, g.a, g.b, g.c, g.c, pref, 1, &r, &found) ==
                      CUBLAS_STATUS_SUCCESS &&
                  found > 0;
  cublasLtMatmulPreferenceDestroy(pref);
  if (ok) g.algo = r.algo;
  return ok;
}

// The plans for X of m × n (row-major; column-major Xᶜ is n × m), or null where Lt refuses.
std::unique_ptr<LtPlans> make_lt_plans(int64_t batch, int64_t m, int64_t n) {
  auto p = std::make_unique<LtPlans>();
  if (cublasLtCreate(&p->handle) != CUBLAS_STATUS_SUCCESS) return nullptr;
  if (cudaMalloc(&p->scratch, p->scratch_bytes) != cudaSuccess) {
    p->scratch = nullptr;
    return nullptr;
  }
  const bool ok = lt_plan(*p, p->gram, CUBLAS_OP_T, CUBLAS_OP_N, n, m, n, m, m, m, batch) &&
                  lt_plan(*p, p->poly, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, m, m, m, batch) &&
                  lt_plan(*p, p->update, CUBLAS_OP_N, CUBLAS_OP_N, n, m, m, m, n, m, batch);
  return ok ? std::move(p) : nullptr;
}

bool lt_run(LtPlans& p, LtGemm& g, float alpha, const uint16_t* A, const uint16_t* B, float beta, const uint16_t* C,
            uint16_t* D, cudaStream_t stream) {
  return cublasLtMatmul(p.handle, g.op, &alpha, A, g.a, B, g.b, &beta, C, g.c, D, g.c, &g.algo, p.scratch,
                        p.scratch_bytes, stream) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace

NsWorkspace::Impl::~Impl() {
  for (void* p : {static_cast<void*>(x), static_cast<void*>(xn), static_cast<void*>(s), static_cast<void*>(bm),
                  static_cast<void*>(partial), static_cast<void*>(norm)})
    cudaFree(p);  // no throw from a destructor
}

NsWorkspace::NsWorkspace(int64_t batch, int64_t rows, int64_t cols) : impl_(std::make_unique<Impl>()) {
  if (batch < 1 || rows < 1 || cols < 1)
    throw UsageError("cuda::NsWorkspace: " + std::to_string(batch) + " matrices of " + std::to_string(rows) + " x " +
                     std::to_string(cols) + " (need at least one non-empty matrix)");
  if (batch > 65535) throw UsageError("cuda::NsWorkspace: at most 65535 matrices per batch");
  Impl& w = *impl_;
  w.batch = batch, w.rows = rows, w.cols = cols;
  w.tall = rows > cols;
  w.m = w.tall ? cols : rows;
  w.n = w.tall ? rows : cols;
  if (w.m > INT32_MAX || w.n > INT32_MAX) throw UsageError("cuda::NsWorkspace: matrix too large for cuBLAS");
  w.tiles_x = (cols + kTile - 1) / kTile;
  w.tiles_y = (rows + kTile - 1) / kTile;
  if (w.tiles_y > 65535) throw UsageError("cuda::NsWorkspace: too many rows");
  const size_t xb = size_t(batch * w.m * w.n) * 2, sb = size_t(batch * w.m * w.m) * 2;
  FPG_CUDA_CHECK(cudaMalloc(&w.x, xb));
  FPG_CUDA_CHECK(cudaMalloc(&w.xn, xb));
  FPG_CUDA_CHECK(cudaMalloc(&w.s, sb));
  FPG_CUDA_CHECK(cudaMalloc(&w.bm, sb));
  FPG_CUDA_CHECK(cudaMalloc(&w.partial, size_t(batch * w.tiles_x * w.tiles_y) * sizeof(double)));
  FPG_CUDA_CHECK(cudaMalloc(&w.norm, size_t(batch) * sizeof(float)));
  w.lt = make_lt_plans(batch, w.m, w.n);
  w.bytes = 2 * xb + 2 * sb + size_t(batch * w.tiles_x * w.tiles_y) * sizeof(double) + size_t(batch) * sizeof(float);
}

NsWorkspace::~NsWorkspace() = default;
NsWorkspace::NsWorkspace(NsWorkspace&&) noexcept = default;
NsWorkspace& NsWorkspace::operator=(NsWorkspace&&) noexcept = default;
int64_t NsWorkspace::batch() const { return impl_->batch; }
int64_t NsWorkspace::rows() const { return impl_->rows; }
int64_t NsWorkspace::cols() const { return impl_->cols; }
size_t NsWorkspace::bytes() const { return impl_->bytes; }
bool NsWorkspace::uses_lt() const { return impl_->lt != nullptr; }

namespace {

constexpr int kThreads = 256;

// norm[z] = bf16(max(bf16(f32(sqrt(Σ partials))), eps)), the partials summed in a fixed order (so the
// norm does not depend on scheduling): newton_schulz.cpp's rounding of torch's bf16 norm and clamp.
__global__ void __launch_bounds__(kThreads) norm_kernel(const double* __restrict__ partial, int64_t tiles, float eps,
                                                        float* __restrict__ norm) {
  __shared__ double red[kThreads];
  const double* pz = partial + blockIdx.x * tiles;
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < tiles; i += kThreads) s += pz[i];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) norm[blockIdx.x] = round_bf16(fmaxf(round_bf16(static_cast<float>(sqrt(red[0]))), eps));
}

// X ← bf16(f32(X) / norm), two elements per thread (m·n may be odd: a scalar remainder per matrix is
// avoided by indexing elements, not pairs, across the whole batch).
__global__ void __launch_bounds__(kThreads) normalize_kernel(uint16_t* __restrict__ x, int64_t per_matrix,
                                                             int64_t total, const float* __restrict__ norm) {
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < total; i += int64_t(gridDim.x) * kThreads) {
    const float nz = norm[i / per_matrix];
    x[i] = bf16_from_float(float_from_bf16(x[i]) / nz);
  }
}

// Row-major C (rows × cols) = alpha·op(A)·op(B) + beta·C for a batch, expressed in cuBLAS's column-major
// terms by the caller; bf16 everywhere, fp32 compute.
void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t M, int64_t N, int64_t K, float alpha,
          const uint16_t* A, int64_t lda, int64_t sa, const uint16_t* B, int64_t ldb, int64_t sb, float beta,
          uint16_t* C, int64_t ldc, int64_t sc, int64_t batch) {
  FPG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, int(M), int(N), int(K), &alpha, A, CUDA_R_16BF, int(lda), sa, B,
                                              CUDA_R_16BF, int(ldb), sb, &beta, C, CUDA_R_16BF, int(ldc), sc, int(batch),
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void check_gpu_ns_options(const optim::NsOptions& opt, const char* who) {
  if (opt.precision != optim::NsPrecision::bf16)
    throw UsageError(std::string(who) + ": the GPU Newton-Schulz runs in bf16 only");
  if (opt.steps < 0 || opt.steps >= 100) throw UsageError(std::string(who) + ": steps must be in [0, 100)");
}

void ns_normalize_and_iterate(NsWorkspace::Impl& w, const optim::NsOptions& opt, cublasHandle_t blas,
                              cudaStream_t stream) {
  const int64_t tiles = w.tiles_x * w.tiles_y, mn = w.m * w.n, mm = w.m * w.m;
  norm_kernel<<<static_cast<unsigned>(w.batch), kThreads, 0, stream>>>(w.partial, tiles, static_cast<float>(opt.eps),
                                                                       w.norm);
  FPG_CUDA_CHECK_LAUNCH();
  const int64_t total = w.batch * mn;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 132 * 16);
  normalize_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(w.x, mn, total, w.norm);
  FPG_CUDA_CHECK_LAUNCH();

  FPG_CUBLAS_CHECK(cublasSetStream(blas, stream));
  const float a = static_cast<float>(opt.coeff.a), b = static_cast<float>(opt.coeff.b),
              c = static_cast<float>(opt.coeff.c);
  const int64_t m = w.m, n = w.n;
  // Row-major X (m × n) is column-major Xᶜ = Xᵀ (n × m, ld n); row-major P·Q is column-major Qᶜ·Pᶜ.
  for (int it = 0; it < opt.steps; ++it) {
    if (w.lt) {  // the same three products, with b·S and a·X read from S and X: no copies
      LtPlans& p = *w.lt;
      if (lt_run(p, p.gram, 1.0f, w.x, w.x, 0.0f, w.s, w.s, stream) &&
          lt_run(p, p.poly, c, w.s, w.s, b, w.s, w.bm, stream) &&
          lt_run(p, p.update, 1.0f, w.x, w.bm, a, w.x, w.xn, stream)) {
        std::swap(w.x, w.xn);
        continue;
      }
      w.lt.reset();  // Lt refused at run time: this iteration and the rest take the fallback below
    }
    // S = X·Xᵀ = (Xᶜ)ᵀ·Xᶜ
    gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, m, n, 1.0f, w.x, n, mn, w.x, n, mn, 0.0f, w.s, m, mm, w.batch);
    // Bm = c·S·S + b·S: cuBLAS's C is read and written, so S is copied into Bm first.
    FPG_CUDA_CHECK(cudaMemcpyAsync(w.bm, w.s, size_t(w.batch * mm) * 2, cudaMemcpyDeviceToDevice, stream));
    gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, c, w.s, m, mm, w.s, m, mm, b, w.bm, m, mm, w.batch);
    // X' = Bm·X + a·X: column-major Xᶜ·Bmᶜ, beta = a on a copy of X.
    FPG_CUDA_CHECK(cudaMemcpyAsync(w.xn, w.x, size_t(w.batch * mn) * 2, cudaMemcpyDeviceToDevice, stream));
    gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, m, 1.0f, w.x, n, mn, w.bm, m, mm, a, w.xn, n, mn, w.batch);
    std::swap(w.x, w.xn);
  }
}

namespace {

struct ReadFp32 {
  const float* in;
  int64_t per_matrix;
  __device__ float operator()(int z, int64_t idx) const { return in[z * per_matrix + idx]; }
};

struct WriteFp32 {
  float* out;
  int64_t per_matrix;
  __device__ void operator()(int z, int64_t idx, float v) const { out[z * per_matrix + idx] = v; }
};

}  // namespace

void newton_schulz(const float* in, const optim::NsOptions& opt, float* out, NsWorkspace& ws, cublasHandle_t blas,
                   cudaStream_t stream) {
  check_gpu_ns_options(opt, "cuda::newton_schulz");
  NsWorkspace::Impl& w = ws.impl();
  const int64_t per = w.rows * w.cols;
  to_x_kernel<<<tile_grid(w), tile_block(), 0, stream>>>(ReadFp32{in, per}, w.rows, w.cols, w.tall, w.x, w.partial);
  FPG_CUDA_CHECK_LAUNCH();
  ns_normalize_and_iterate(w, opt, blas, stream);
  from_x_kernel<<<tile_grid(w), tile_block(), 0, stream>>>(WriteFp32{out, per}, w.rows, w.cols, w.tall, w.x);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
