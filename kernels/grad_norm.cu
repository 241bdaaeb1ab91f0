// The grad norm's passes over a GradSpanTable (kernels/grad_norm.h). The spans are cut into tiles of
// at most kTileElems elements; a persistent grid strides over the tiles, every thread keeping its max
// or 128-bit sum in registers across all its tiles, and each block leaves one partial. The block that
// finishes last reduces the partials and writes the result, so a call is one launch and one copy back,
// with nothing to zero beforehand.
#include "kernels/grad_norm.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda_check.h"
#include "kernels/fp8_launch.h"
#include "kernels/optim_table.h"

namespace fpg::cuda {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVecsPerThread = 4;                          // 16-byte loads in flight before the first use
constexpr int kTileElems = kThreads * kVecsPerThread * 4;  // one round of a block

// numel floats from data, within one span. A tile visits its first elements up to a 16-byte boundary
// and its last (numel - head) % 4 singly, the rest as float4.
struct GradTile {
  float* data = nullptr;
  int32_t numel = 0;
};

// Floats before the first 16-byte boundary at or after p (p is float-aligned).
__host__ __device__ inline int unaligned_head(const float* p) {
  return static_cast<int>((16u - (static_cast<unsigned>(reinterpret_cast<uintptr_t>(p)) & 15u)) & 15u) >> 2;
}

struct GradSpanTable::Impl {
  DeviceArray<GradTile> tiles;
  DeviceArray<unsigned> block_max;         // a reduction's partial per block
  DeviceArray<ulonglong2> block_sum;       // {low, high} word of a block's 128-bit partial
  DeviceArray<unsigned> arrivals;          // blocks finished in the running reduction; back to 0 after it
  DeviceArray<unsigned long long> result;  // [0] max |g| bits, [1] low and [2] high word of the sum
  int64_t elements = 0;
  int max_grid = 0;                        // blocks the partial arrays hold
};

namespace {

// |x| as its bit pattern: for non-negative floats (and NaNs with the sign cleared, which sort above
// inf) integer order is float order, so an integer max is the float max with NaN sticking.
__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// f(tile) for this block's tiles: blockIdx.x, + gridDim.x, ... (counted from the last tile when
// last_first). The next tile's descriptor is loaded before f runs on the current one.
template <typename F>
__device__ __forceinline__ void for_each_tile(const GradTile* __restrict__ tiles, int64_t n, bool last_first, F&& f) {
  const auto at = [&](int64_t k) { return k < n ? tiles[last_first ? n - 1 - k : k] : GradTile{}; };
  GradTile cur = at(blockIdx.x);
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const GradTile next = at(k + gridDim.x);
    f(cur);
    cur = next;
  }
}

// op(x) on every element of the tile, stored back when kStore: the aligned body as float4, each
// thread's kVecsPerThread loads issued before the first op; then the head and tail (< 4 each), one
// element per thread. The tile's pointer is generic; the intrinsics name the global space (LDG/STG).
template <bool kStore, typename Op>
__device__ __forceinline__ void visit_tile(const GradTile t, Op&& op) {
  float* const p = t.data;
  const int n = t.numel;
  const int head = min(n, unaligned_head(p));
  const int nvec = (n - head) >> 2;
  float4* const v = reinterpret_cast<float4*>(p + head);
  for (int base = threadIdx.x; base < nvec; base += kThreads * kVecsPerThread) {
    float4 x[kVecsPerThread];
#pragma unroll
    for (int k = 0; k < kVecsPerThread; ++k)
      if (base + k * kThreads < nvec) x[k] = __ldcg(v + base + k * kThreads);
#pragma unroll
    for (int k = 0; k < kVecsPerThread; ++k)
      if (base + k * kThreads < nvec) {
        op(x[k].x);
        op(x[k].y);
        op(x[k].z);
        op(x[k].w);
        if (kStore) __stwb(v + base + k * kThreads, x[k]);
      }
  }
  const int tail = head + 4 * nvec;
  const int s = threadIdx.x;
  if (s < head + (n - tail)) {
    float* const e = s < head ? p + s : p + tail + (s - head);
    float y = __ldcg(e);
    op(y);
    if (kStore) __stwb(e, y);
  }
}

// The block's max, in thread 0.
__device__ unsigned block_max_of(unsigned v) {
  __shared__ unsigned warp_max[kWarps];
  v = __reduce_max_sync(0xffffffffu, v);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kWarps; ++w) v = max(v, warp_max[w]);
  return v;
}

// The block's sum, in thread 0: 128-bit integer additions (the shuffles move the two words), exact.
__device__ uint128 block_sum_of(uint128 v) {
  __shared__ uint128 warp_sum[kWarps];
  for (int off = 16; off > 0; off >>= 1) {
    const unsigned long long lo = __shfl_down_sync(0xffffffffu, static_cast<unsigned long long>(v), off);
    const unsigned long long hi = __shfl_down_sync(0xffffffffu, static_cast<unsigned long long>(v >> 64), off);
    v += (static_cast<uint128>(hi) << 64) | lo;
  }
  if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kWarps; ++w) v += warp_sum[w];
  return v;
}

// True, in every thread, in the grid's last block to get here; thread 0 has stored the block's partial
// before. atomicInc wraps the count back to 0 on the last arrival, ready for the next launch. The
// fences order each partial before its arrival, and the last block's reads after every arrival.
__device__ bool last_to_arrive(unsigned* arrivals) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicInc(arrivals, gridDim.x - 1) == gridDim.x - 1;
    __threadfence();
  }
  __syncthreads();
  return last;
}

template <bool kScale>
__global__ void __launch_bounds__(kThreads)
    max_kernel(const GradTile* __restrict__ tiles, int64_t n_tiles, float divisor, unsigned acc,
               unsigned* __restrict__ block_max, unsigned* arrivals, unsigned long long* result) {
  unsigned mx = 0;
  for_each_tile(tiles, n_tiles, false, [&](const GradTile& t) {
    visit_tile<kScale>(t, [&](float& x) {
      if (kScale) x = x / divisor;  // as BucketedPart::scale_grads: g[k] / divisor, IEEE division
      mx = max(mx, abs_bits(x));
    });
  });
  mx = block_max_of(mx);
  if (threadIdx.x == 0) block_max[blockIdx.x] = mx;
  if (!last_to_arrive(arrivals)) return;
  unsigned all = acc;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += kThreads) all = max(all, __ldcg(block_max + b));
  all = block_max_of(all);
  if (threadIdx.x == 0) result[0] = all;
}

// lift = 2^(30-E): r = g·2^(30-E) is exact (a power-of-two scale of an fp32 in double), r·r is exact
// (48 significant bits) and equals add_scaled_squares' exact (g·2^-E)²·2^60, so the truncation
// (= floor, r·r >= 0) gives the CPU's q(g).
// With max_bits, lift comes from the max the max kernel left there (norm_exponent on the device, as
// the CPU's frexp); a non-finite max (the step is skipped) leaves the sum unset, in every block alike.
__global__ void __launch_bounds__(kThreads)
    squares_kernel(const GradTile* __restrict__ tiles, int64_t n_tiles, double lift, const unsigned long long* max_bits,
                   ulonglong2* __restrict__ block_sum, unsigned* arrivals, unsigned long long* result) {
  if (max_bits) {
    const float m = __uint_as_float(static_cast<unsigned>(__ldcg(max_bits)));
    if (!(m <= FLT_MAX)) return;
    int e = 0;
    if (m > 0.0f) frexp(static_cast<double>(m), &e);
    lift = ldexp(1.0, 30 - e);
  }
  uint128 sum = 0;
  // Last tile first: the scale pass before this one finished there, so those tiles are still in L2.
  for_each_tile(tiles, n_tiles, true, [&](const GradTile& t) {
    visit_tile<false>(t, [&](float& x) {
      const double r = static_cast<double>(x) * lift;
      sum += static_cast<unsigned long long>(r * r);
    });
  });
  sum = block_sum_of(sum);
  if (threadIdx.x == 0)
    block_sum[blockIdx.x] = make_ulonglong2(static_cast<unsigned long long>(sum), static_cast<unsigned long long>(sum >> 64));
  if (!last_to_arrive(arrivals)) return;
  uint128 all = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += kThreads) {
    const ulonglong2 w = __ldcg(block_sum + b);
    all += (static_cast<uint128>(w.y) << 64) | w.x;
  }
  all = block_sum_of(all);
  if (threadIdx.x == 0) {
    result[1] = static_cast<unsigned long long>(all);
    result[2] = static_cast<unsigned long long>(all >> 64);
  }
}

__global__ void __launch_bounds__(kThreads) scale_kernel(const GradTile* __restrict__ tiles, int64_t n_tiles, float coef) {
  for_each_tile(tiles, n_tiles, false, [&](const GradTile& t) { visit_tile<true>(t, [&](float& x) { x = x * coef; }); });
}

// Spans cut into tiles: a span's first tile takes the head up to the 16-byte boundary plus kTileElems,
// the others kTileElems, so every tile but a span's first starts aligned.
std::vector<GradTile> make_tiles(const std::vector<GradSpan>& spans) {
  std::vector<GradTile> tiles;
  for (const GradSpan& s : spans) {
    const int64_t head = std::min<int64_t>(s.numel, unaligned_head(s.data));
    for (int64_t b = 0; b < s.numel;) {
      const int64_t e = std::min<int64_t>(s.numel, (b == 0 ? head : b) + kTileElems);
      tiles.push_back(GradTile{s.data + b, static_cast<int32_t>(e - b)});
      b = e;
    }
  }
  return tiles;
}

// A persistent grid, no larger than the tiles or `cap`.
unsigned grid_for(const void* kernel, size_t tiles, size_t cap = SIZE_MAX) {
  const size_t fill = static_cast<size_t>(fp8::persistent_blocks(kernel, kThreads));
  return static_cast<unsigned>(std::min({tiles, fill, cap}));
}

const void* max_kernel_ptr(bool scale) {
  return scale ? reinterpret_cast<const void*>(&max_kernel<true>) : reinterpret_cast<const void*>(&max_kernel<false>);
}

unsigned acc_bits(float acc) {
  uint32_t u = 0;
  std::memcpy(&u, &acc, 4);
  return u & 0x7fffffffu;
}

float float_of(uint32_t bits) {
  float out = 0;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Enqueues the max pass (scaling by divisor unless it is 1: x / 1 == x, so the pass only reads),
// leaving the max's bits in result[0]. The table has tiles.
template <bool kScale>
void launch_max(const GradSpanTable::Impl& im, float divisor, unsigned init, cudaStream_t stream) {
  const unsigned grid = grid_for(max_kernel_ptr(kScale), im.tiles.size(), static_cast<size_t>(im.max_grid));
  max_kernel<kScale><<<grid, kThreads, 0, stream>>>(im.tiles.get(), static_cast<int64_t>(im.tiles.size()), divisor,
                                                    init, im.block_max.get(), im.arrivals.get(), im.result.get());
  FPG_CUDA_CHECK_LAUNCH();
}

void launch_max(const GradSpanTable::Impl& im, float divisor, float acc, cudaStream_t stream) {
  if (divisor == 1.0f)
    launch_max<false>(im, divisor, acc_bits(acc), stream);
  else
    launch_max<true>(im, divisor, acc_bits(acc), stream);
}

// Enqueues the squares pass at `exponent`, or at the exponent of the max in result[0] when from_max.
void launch_squares(const GradSpanTable::Impl& im, int exponent, bool from_max, cudaStream_t stream) {
  const unsigned grid =
      grid_for(reinterpret_cast<const void*>(&squares_kernel), im.tiles.size(), static_cast<size_t>(im.max_grid));
  squares_kernel<<<grid, kThreads, 0, stream>>>(im.tiles.get(), static_cast<int64_t>(im.tiles.size()),
                                                std::ldexp(1.0, 30 - exponent), from_max ? im.result.get() : nullptr,
                                                im.block_sum.get(), im.arrivals.get(), im.result.get());
  FPG_CUDA_CHECK_LAUNCH();
}

// result[first, first + n) copied to the host once the stream gets there.
void copy_result(const GradSpanTable::Impl& im, size_t first, size_t n, unsigned long long* out, cudaStream_t stream) {
  FPG_CUDA_CHECK(cudaMemcpyAsync(out, im.result.get() + first, n * sizeof *out, cudaMemcpyDeviceToHost, stream));
  FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

float run_max(const GradSpanTable& t, float divisor, float acc, cudaStream_t stream) {
  const auto& im = t.impl();
  if (im.tiles.size() == 0) return float_of(acc_bits(acc));
  launch_max(im, divisor, acc, stream);
  unsigned long long bits = 0;
  copy_result(im, 0, 1, &bits, stream);
  return float_of(static_cast<uint32_t>(bits));
}

}  // namespace

GradSpanTable::GradSpanTable(const std::vector<GradSpan>& spans) : impl_(std::make_unique<Impl>()) {
  for (const GradSpan& s : spans) {
    if (s.numel < 0) throw UsageError("cuda::GradSpanTable: a span has a negative size");
    if (s.numel > 0 && !s.data) throw UsageError("cuda::GradSpanTable: a span has no data");
    if (reinterpret_cast<uintptr_t>(s.data) % alignof(float) != 0)
      throw UsageError("cuda::GradSpanTable: a span's data is not 4-byte aligned");
    impl_->elements += s.numel;
  }
  const std::vector<GradTile> tiles = make_tiles(spans);
  impl_->tiles.assign(tiles);
  if (tiles.empty()) return;
  int most = 0;
  for (const void* k : {max_kernel_ptr(true), max_kernel_ptr(false), reinterpret_cast<const void*>(&squares_kernel)})
    most = std::max(most, fp8::persistent_blocks(k, kThreads));
  impl_->max_grid = static_cast<int>(std::min<size_t>(tiles.size(), static_cast<size_t>(most)));
  impl_->block_max.resize_zeroed(impl_->max_grid);
  impl_->block_sum.resize_zeroed(impl_->max_grid);
  impl_->arrivals.resize_zeroed(1);
  impl_->result.resize_zeroed(3);
}

GradSpanTable::~GradSpanTable() = default;
GradSpanTable::GradSpanTable(GradSpanTable&&) noexcept = default;
GradSpanTable& GradSpanTable::operator=(GradSpanTable&&) noexcept = default;
int64_t GradSpanTable::elements() const { return impl_->elements; }

float scale_and_max_abs(const GradSpanTable& t, float divisor, float acc, cudaStream_t stream) {
  return run_max(t, divisor, acc, stream);
}

float max_abs(const GradSpanTable& t, float acc, cudaStream_t stream) { return run_max(t, 1.0f, acc, stream); }

uint128 scaled_squares(const GradSpanTable& t, int exponent, cudaStream_t stream) {
  const auto& im = t.impl();
  if (im.tiles.size() == 0) return 0;
  launch_squares(im, exponent, false, stream);
  unsigned long long w[2] = {0, 0};
  copy_result(im, 1, 2, w, stream);
  return (static_cast<uint128>(w[1]) << 64) | w[0];
}

MaxAndSquares scale_max_and_squares(const GradSpanTable& t, float divisor, float acc, cudaStream_t stream) {
  const auto& im = t.impl();
  if (im.tiles.size() == 0) return {float_of(acc_bits(acc)), 0};
  launch_max(im, divisor, acc, stream);
  launch_squares(im, 0, true, stream);
  unsigned long long w[3] = {0, 0, 0};
  copy_result(im, 0, 3, w, stream);
  const float mx = float_of(static_cast<uint32_t>(w[0]));
  if (!std::isfinite(mx)) return {mx, 0};
  return {mx, (static_cast<uint128>(w[2]) << 64) | w[1]};
}

void scale(const GradSpanTable& t, float coef, cudaStream_t stream) {
  const auto& im = t.impl();
  if (im.tiles.size() == 0) return;
  const unsigned grid = grid_for(reinterpret_cast<const void*>(&scale_kernel), im.tiles.size());
  scale_kernel<<<grid, kThreads, 0, stream>>>(im.tiles.get(), static_cast<int64_t>(im.tiles.size()), coef);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
