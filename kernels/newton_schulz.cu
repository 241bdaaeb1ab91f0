#include "kernels/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "kernels/newton_schulz_impl.h"

namespace fpg::cuda {

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
  w.bytes = 2 * xb + 2 * sb + size_t(batch * w.tiles_x * w.tiles_y) * sizeof(double) + size_t(batch) * sizeof(float);
}

NsWorkspace::~NsWorkspace() = default;
NsWorkspace::NsWorkspace(NsWorkspace&&) noexcept = default;
NsWorkspace& NsWorkspace::operator=(NsWorkspace&&) noexcept = default;
int64_t NsWorkspace::batch() const { return impl_->batch; }
int64_t NsWorkspace::rows() const { return impl_->rows; }
int64_t NsWorkspace::cols() const { return impl_->cols; }
size_t NsWorkspace::bytes() const { return impl_->bytes; }

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
