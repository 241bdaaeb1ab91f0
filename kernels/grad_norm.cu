#include "kernels/grad_norm.h"

#include <cmath>
#include <cstring>

#include "kernels/cuda_check.h"
#include "kernels/optim_table.h"

namespace fpg::cuda {

struct GradSpanTable::Impl {
  DeviceArray<GradSpan> spans;
  DeviceArray<Chunk> chunks;
  DeviceArray<unsigned long long> slots;  // [0] max |g| bits, [1] low and [2] high word of the sum
  int64_t elements = 0;
};

GradSpanTable::GradSpanTable(const std::vector<GradSpan>& spans) : impl_(std::make_unique<Impl>()) {
  std::vector<int64_t> numels(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].numel < 0) throw UsageError("cuda::GradSpanTable: a span has a negative size");
    if (spans[i].numel > 0 && !spans[i].data) throw UsageError("cuda::GradSpanTable: a span has no data");
    numels[i] = spans[i].numel;
    impl_->elements += spans[i].numel;
  }
  const std::vector<Chunk> chunks = make_chunks(numels);
  if (chunks.size() > static_cast<size_t>(INT32_MAX)) throw UsageError("cuda::GradSpanTable: too many chunks");
  impl_->spans.assign(spans);
  impl_->chunks.assign(chunks);
  impl_->slots.resize_zeroed(3);
}

GradSpanTable::~GradSpanTable() = default;
GradSpanTable::GradSpanTable(GradSpanTable&&) noexcept = default;
GradSpanTable& GradSpanTable::operator=(GradSpanTable&&) noexcept = default;
int64_t GradSpanTable::elements() const { return impl_->elements; }

namespace {

constexpr int kThreads = 256;

// |x| as its bit pattern: for non-negative floats (and NaNs with the sign cleared, which sort above
// inf) integer order is float order, so an integer max is the float max with NaN sticking.
__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

template <bool kScale>
__global__ void __launch_bounds__(kThreads) max_kernel(const GradSpan* __restrict__ spans, const Chunk* __restrict__ chunks,
                                                       float divisor, unsigned long long* slots) {
  const Chunk c = chunks[blockIdx.x];
  float* __restrict__ g = spans[c.item].data;
  unsigned mx = 0;
  for (int64_t e = c.begin + threadIdx.x; e < c.end; e += kThreads) {
    float x = g[e];
    if (kScale) {
      x = x / divisor;  // as BucketedPart::scale_grads: g[k] / divisor, IEEE division
      g[e] = x;
    }
    mx = max(mx, abs_bits(x));
  }
  mx = __reduce_max_sync(0xffffffffu, mx);
  if ((threadIdx.x & 31) == 0 && mx != 0) atomicMax(slots, static_cast<unsigned long long>(mx));
}

__global__ void __launch_bounds__(kThreads) squares_kernel(const GradSpan* __restrict__ spans,
                                                           const Chunk* __restrict__ chunks, double scale,
                                                           unsigned long long* slots) {
  __shared__ uint128 part[kThreads];
  const Chunk c = chunks[blockIdx.x];
  const float* __restrict__ g = spans[c.item].data;
  const double lift = 1152921504606846976.0;  // 2^60
  uint128 sum = 0;
  for (int64_t e = c.begin + threadIdx.x; e < c.end; e += kThreads) {
    const double r = static_cast<double>(g[e]) * scale;  // exact: a power-of-two scale
    sum += static_cast<unsigned long long>((r * r) * lift);  // as add_scaled_squares: truncation = floor
  }
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    // A 128-bit atomic add from two 64-bit ones: the low word's carry goes to the high word. Integer
    // addition is associative, so the order blocks arrive in cannot change the total.
    const uint128 s = part[0];
    const unsigned long long lo = static_cast<unsigned long long>(s), hi = static_cast<unsigned long long>(s >> 64);
    const unsigned long long old = atomicAdd(slots + 1, lo);
    const unsigned long long carry = old + lo < old ? 1ull : 0ull;
    if (hi + carry != 0) atomicAdd(slots + 2, hi + carry);
  }
}

__global__ void __launch_bounds__(kThreads) scale_kernel(const GradSpan* __restrict__ spans,
                                                         const Chunk* __restrict__ chunks, float coef) {
  const Chunk c = chunks[blockIdx.x];
  float* __restrict__ g = spans[c.item].data;
  for (int64_t e = c.begin + threadIdx.x; e < c.end; e += kThreads) g[e] = g[e] * coef;
}

unsigned long long acc_bits(float acc) {
  uint32_t u = 0;
  std::memcpy(&u, &acc, 4);
  return u & 0x7fffffffu;
}

float read_max(const GradSpanTable::Impl& im, cudaStream_t stream) {
  unsigned long long bits = 0;
  FPG_CUDA_CHECK(cudaMemcpyAsync(&bits, im.slots.get(), sizeof bits, cudaMemcpyDeviceToHost, stream));
  FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
  const uint32_t u = static_cast<uint32_t>(bits);
  float out = 0;
  std::memcpy(&out, &u, 4);
  return out;
}

template <bool kScale>
float run_max(const GradSpanTable& t, float divisor, float acc, cudaStream_t stream) {
  const auto& im = t.impl();
  const unsigned long long init = acc_bits(acc);
  FPG_CUDA_CHECK(cudaMemcpyAsync(im.slots.get(), &init, sizeof init, cudaMemcpyHostToDevice, stream));
  if (im.chunks.size() > 0) {
    max_kernel<kScale><<<static_cast<unsigned>(im.chunks.size()), kThreads, 0, stream>>>(
        im.spans.get(), im.chunks.get(), divisor, im.slots.get());
    FPG_CUDA_CHECK_LAUNCH();
  }
  return read_max(im, stream);
}

}  // namespace

float scale_and_max_abs(const GradSpanTable& t, float divisor, float acc, cudaStream_t stream) {
  return run_max<true>(t, divisor, acc, stream);
}

float max_abs(const GradSpanTable& t, float acc, cudaStream_t stream) { return run_max<false>(t, 1.0f, acc, stream); }

uint128 scaled_squares(const GradSpanTable& t, int exponent, cudaStream_t stream) {
  const auto& im = t.impl();
  FPG_CUDA_CHECK(cudaMemsetAsync(im.slots.get() + 1, 0, 2 * sizeof(unsigned long long), stream));
  if (im.chunks.size() > 0) {
    squares_kernel<<<static_cast<unsigned>(im.chunks.size()), kThreads, 0, stream>>>(
        im.spans.get(), im.chunks.get(), std::ldexp(1.0, -exponent), im.slots.get());
    FPG_CUDA_CHECK_LAUNCH();
  }
  unsigned long long w[2] = {0, 0};
  FPG_CUDA_CHECK(cudaMemcpyAsync(w, im.slots.get() + 1, sizeof w, cudaMemcpyDeviceToHost, stream));
  FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
  return (static_cast<uint128>(w[1]) << 64) | w[0];
}

void scale(const GradSpanTable& t, float coef, cudaStream_t stream) {
  const auto& im = t.impl();
  if (im.chunks.size() == 0) return;
  scale_kernel<<<static_cast<unsigned>(im.chunks.size()), kThreads, 0, stream>>>(im.spans.get(), im.chunks.get(), coef);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
