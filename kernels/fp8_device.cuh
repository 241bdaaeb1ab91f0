// Device-side pieces the FP8 kernels share: the walk from a job's work items to tensor elements, the
// 16-byte loads of a source, and the grid cells. The per-element math is the CPU's own FPG_HD code
// (core/float_codec.h, fp8/format.h, fp8/scale_rules.h, fp8/source.h), so results are bit-identical.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fp8/amax.h"
#include "fp8/cast_loops.h"
#include "fp8/format.h"
#include "fp8/mxfp8.h"
#include "fp8/source.h"
#include "kernels/fp8_batch.h"
#include "kernels/fp8_job.h"

namespace fpg::cuda::fp8::dev {

using fpg::fp8::Format;
using fpg::fp8::Input;
using fpg::fp8::Scaling;
using fpg::fp8::SrcBf16;
using fpg::fp8::SrcF32;
using fpg::fp8::SrcF32AsBf16;

constexpr int kThreads = 256;
// Blocks per SM the kernels are register-limited for (launch bounds). The specialised streaming
// modes (tensor, rows, fused) fit 64 registers: 4 x 256 threads per SM, each with 128 bytes of fp32
// loads in flight (about 128 KB per SM, what HBM3e needs at ~4.8 TB/s); the generic modes 2 x 256.
constexpr int kMinBlocks = 2;
constexpr int kMinBlocksFast = 4;
constexpr unsigned kFull = 0xFFFFFFFFu;

// q = a / b, r = a % b, with the cheaper 32-bit division when both fit (the common case).
__device__ __forceinline__ void divmod(uint64_t a, uint64_t b, uint64_t& q, uint64_t& r) {
  if (((a | b) >> 32) == 0) {
    const uint32_t q32 = static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
    q = q32;
    r = static_cast<uint32_t>(a) - q32 * static_cast<uint32_t>(b);
  } else {
    q = a / b;
    r = a - q * b;
  }
}

__device__ __forceinline__ bool per_tensor(const DeviceJob& j) {
  return j.scaling == static_cast<uint8_t>(Scaling::tensorwise) ||
         j.scaling == static_cast<uint8_t>(Scaling::delayed);
}

// Main-grid cell of element (r, c) (scale_grid.h's cell_of, with power-of-two bands and blocks).
__device__ __forceinline__ uint64_t main_cell(const DeviceJob& j, uint64_t r, uint64_t c) {
  if (per_tensor(j)) return 0;
  return (r >> j.band_shift) * j.grid_cols + (c >> j.block_shift);
}

// Main-grid cell of flat element g (one division for 2-D grids).
__device__ __forceinline__ uint64_t main_cell_flat(const DeviceJob& j, uint64_t g) {
  if (per_tensor(j)) return 0;
  uint64_t r, c;
  divmod(g, j.K, r, c);
  return main_cell(j, r, c);
}

// Vectors per thread and round: 128 bytes of fp32 input in flight, 64 of bf16 (register budget).
template <class S, int V>
constexpr int loads_in_flight() {
  return sizeof(typename S::T) == 4 || V == 1 ? 8 : 4;
}

// Number of tensor elements in main-grid cell `cell`.
__device__ __forceinline__ uint64_t main_cell_size(const DeviceJob& j, uint64_t cell) {
  if (per_tensor(j)) return j.M * j.K;
  const uint64_t band = cell / j.grid_cols, cb = cell - band * j.grid_cols;
  const uint64_t br = uint64_t{1} << j.band_shift, bc = uint64_t{1} << j.block_shift;
  const uint64_t rows = j.M - band * br < br ? j.M - band * br : br;
  const uint64_t cols = j.K - cb * bc < bc ? j.K - cb * bc : bc;
  return rows * cols;
}

// The rows a job's fragment touches.
__device__ __forceinline__ uint64_t first_row(const DeviceJob& j) {
  uint64_t q, r;
  divmod(j.start, j.K, q, r);
  return q;
}

// The V source values of one 16-byte word (V == 4: fp32, V == 8: bf16).
template <class S, int V>
__device__ __forceinline__ void unpack16(const uint4& t, typename S::T (&x)[V]) {
  using T = typename S::T;
  if constexpr (sizeof(T) == 4) {
    static_assert(V == 4, "fp32 vectors are 4 wide");
    x[0] = __uint_as_float(t.x);
    x[1] = __uint_as_float(t.y);
    x[2] = __uint_as_float(t.z);
    x[3] = __uint_as_float(t.w);
  } else {
    static_assert(V == 8, "bf16 vectors are 8 wide");
    const uint32_t w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[2 * k] = static_cast<uint16_t>(w[k] & 0xFFFFu);
      x[2 * k + 1] = static_cast<uint16_t>(w[k] >> 16);
    }
  }
}

// V consecutive raw source values at flat index g, which the caller knows to be inside the fragment
// (g % V == 0 when V > 1): one 16-byte load, or one element.
template <class S, int V>
__device__ __forceinline__ void load_raw(const DeviceJob& j, uint64_t g, typename S::T (&x)[V]) {
  using T = typename S::T;
  const T* p = static_cast<const T*>(j.in) + (g - j.start);
  if constexpr (V == 1) {
    x[0] = __ldg(p);
  } else {
    unpack16<S, V>(__ldg(reinterpret_cast<const uint4*>(p)), x);
  }
}

template <int V>
constexpr uint32_t full_mask() {
  return V == 32 ? kFull : ((1u << V) - 1u);
}

// V consecutive raw source values at flat index g (g % V == 0 when V > 1). Returns the mask of the
// elements inside the fragment (the others read as 0); a vector wholly inside is one 16-byte load.
template <class S, int V>
__device__ __forceinline__ uint32_t load_vec(const DeviceJob& j, uint64_t g, typename S::T (&x)[V]) {
  using T = typename S::T;
  const T* base = static_cast<const T*>(j.in);
  const uint64_t s = j.start, e = j.start + j.count;
  if (g >= s && g + V <= e) {
    load_raw<S, V>(j, g, x);
    return full_mask<V>();
  }
  uint32_t mask = 0;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    x[k] = T(0);
    if (g + k >= s && g + k < e) {
      x[k] = __ldg(base + (g + k - s));
      mask |= 1u << k;
    }
  }
  return mask;
}

// Walks a task's n items (vectors of V elements; item i starts at flat element gbase + i * V) in
// rounds of blockDim.x * U items, block-strided so that each warp access is contiguous. A round wholly
// inside the task and the fragment (all but the first and last of a fragment) issues its U loads at
// once without checks and calls full(x, g0): x[u] is the vector at g0 + u * kThreads * V. The
// others go one vector at a time with masks (elements outside the fragment read as 0) and call
// edge(x, g, mask, in_task) for every u in every thread, uniformly (both may shuffle): mask is 0 for
// a vector outside the fragment, in_task false past n.
template <class S, int V, int U, class Full, class Edge>
__device__ __forceinline__ void stream_rounds(const DeviceJob& j, uint64_t gbase, uint32_t n, Full&& full, Edge&& edge) {
  using T = typename S::T;
  constexpr uint32_t step = kThreads * U;  // the kernels run kThreads per block: constant strides
  for (uint32_t b0 = 0; b0 < n; b0 += step) {
    const uint64_t g0 = gbase + uint64_t{b0 + threadIdx.x} * V;
    if (b0 + step <= n && gbase + uint64_t{b0} * V >= j.start && gbase + uint64_t{b0 + step} * V <= j.start + j.count) {
      T x[U][V];
#pragma unroll
      for (int u = 0; u < U; ++u) load_raw<S, V>(j, g0 + u * kThreads * V, x[u]);
      full(x, g0);
    } else {
#pragma unroll 1
      for (int u = 0; u < U; ++u) {
        const uint32_t i = b0 + u * kThreads + threadIdx.x;
        const uint64_t g = gbase + uint64_t{i} * V;
        T x[V];
#pragma unroll
        for (int k = 0; k < V; ++k) x[k] = T(0);
        const uint32_t mask = i < n ? load_vec<S, V>(j, g, x) : 0u;
        edge(x, g, mask, i < n);
      }
    }
  }
}

// stream_rounds with one function for every vector: fn(x, g, mask, in_task).
template <class S, int V, int U, class Fn>
__device__ __forceinline__ void stream_items(const DeviceJob& j, uint64_t gbase, uint32_t n, Fn&& fn) {
  using T = typename S::T;
  stream_rounds<S, V, U>(
      j, gbase, n,
      [&](const T(&x)[U][V], uint64_t g0) {
#pragma unroll
        for (int u = 0; u < U; ++u) fn(x[u], g0 + u * kThreads * V, full_mask<V>(), true);
      },
      fn);
}

// Stores V bytes for the elements of `mask` at flat index g into a fragment slice (out = element
// `start`); one 4- or 8-byte store when all are present.
template <int V>
__device__ __forceinline__ void store_vec(uint8_t* out, uint64_t start, uint64_t g, uint32_t mask,
                                          const uint8_t (&q)[V]) {
  if constexpr (V == 4) {
    if (mask == 0xFu) {
      const uint32_t w = q[0] | (uint32_t{q[1]} << 8) | (uint32_t{q[2]} << 16) | (uint32_t{q[3]} << 24);
      *reinterpret_cast<uint32_t*>(out + (g - start)) = w;
      return;
    }
  } else if constexpr (V == 8) {
    if (mask == 0xFFu) {
      uint2 w;
      w.x = q[0] | (uint32_t{q[1]} << 8) | (uint32_t{q[2]} << 16) | (uint32_t{q[3]} << 24);
      w.y = q[4] | (uint32_t{q[5]} << 8) | (uint32_t{q[6]} << 16) | (uint32_t{q[7]} << 24);
      *reinterpret_cast<uint2*>(out + (g - start)) = w;
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k)
    if (mask & (1u << k)) out[g + k - start] = q[k];
}

// Per-tensor amax folding in a task loop: `a` is this thread's max over the current job's task; when
// the CTA's next task belongs to another job (or there is none), the block reduces it and thread 0
// folds it into the job's amax. Uniform over the block (the task list is).
__device__ __forceinline__ void fold_tensor_amax(uint32_t& a, float* amax, const Task* tasks, uint32_t t,
                                                 uint32_t n, uint32_t* red /* kThreads/32 words */);

// The saturating RNE encoder of fp8/format.h for two values at once: on sm_89+ one
// cvt.rn.satfinite.{e4m3,e5m2}x2.f32 instruction, which equals e4m3_satfinite / e5m2_satfinite on
// all 2^32 inputs, NaN -> 0x7F included (checked exhaustively on an H200, sm_90;
// tests/gpu/fp8_cast_test.cpp holds it to the CPU encoder on a dense sample). Byte 0 encodes a, byte 1 b.
template <Format F>
__device__ __forceinline__ void encode2(float a, float b, uint8_t& qa, uint8_t& qb) {
  const __nv_fp8x2_storage_t w =
      __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, F == Format::e4m3 ? __NV_E4M3 : __NV_E5M2);
  qa = static_cast<uint8_t>(w & 0xFFu);
  qb = static_cast<uint8_t>(w >> 8);
}

// encode(load(x[k]) * scale[k]) for a vector: pairs through encode2, a single element through the
// CPU's own FPG_HD encoder.
template <Format F, class S, int V>
__device__ __forceinline__ void encode_vec(const typename S::T (&x)[V], const float (&scale)[V], uint8_t (&q)[V]) {
  if constexpr (V == 1) {
    q[0] = fpg::fp8::encode<F>(S::load(x[0]) * scale[0]);
  } else {
#pragma unroll
    for (int k = 0; k < V; k += 2) encode2<F>(S::load(x[k]) * scale[k], S::load(x[k + 1]) * scale[k + 1], q[k], q[k + 1]);
  }
}

// encode(a), encode(b), encode(c), encode(d) as the bytes of one word, byte 0 first: two cvt
// instructions, no byte shuffling.
template <Format F>
__device__ __forceinline__ uint32_t encode4(float a, float b, float c, float d) {
  constexpr __nv_fp8_interpretation_t kind = F == Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kind);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, kind);
  return lo | (hi << 16);
}

// Stores encode(load(x[k]) * s[k]) for a whole vector (V == 4 or 8) at p, in global memory: one 4-
// or 8-byte global store that does not allocate in L1. The encoded bytes are never read back by the
// kernel, and L1 is what holds its descriptors and tasks (BENCHMARKS.md has the fused
// tile kernels measured with and without).
template <Format F, class S, int V>
__device__ __forceinline__ void store_encoded(uint8_t* p, const typename S::T (&x)[V], const float (&s)[V]) {
  static_assert(V == 4 || V == 8, "16-byte vectors");
  uint32_t w[V / 4];
#pragma unroll
  for (int h = 0; h < V / 4; ++h)
    w[h] = encode4<F>(S::load(x[4 * h]) * s[4 * h], S::load(x[4 * h + 1]) * s[4 * h + 1],
                      S::load(x[4 * h + 2]) * s[4 * h + 2], S::load(x[4 * h + 3]) * s[4 * h + 3]);
  if constexpr (V == 4) asm volatile("st.global.L1::no_allocate.b32 [%0], %1;" ::"l"(p), "r"(w[0]) : "memory");
  else asm volatile("st.global.L1::no_allocate.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
}

// max(m, |load(x[k])|) over a vector, as a float whose bits are the max of amax_key (amax.h): fmaxf
// ignores a NaN operand (amax_key maps NaN to 0, and m starts at +0), and for non-negative floats
// the order of the values is the order of their bits. One max instruction per fp32 element.
template <class S, int V>
__device__ __forceinline__ float vec_abs_max(float m, const typename S::T (&x)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) m = fmaxf(m, fabsf(S::load(x[k])));
  return m;
}

// The ordering key of |load(x)| (amax.h): the amax of what gets quantized, NaN as 0.
template <class S>
__device__ __forceinline__ uint32_t key_of(typename S::T x) {
  return fpg::fp8::amax_key(S::load(x));
}

// The max of the ordering keys of a vector's values (elements outside a fragment read as 0, key 0).
template <class S, int V>
__device__ __forceinline__ uint32_t vec_key_max(const typename S::T (&x)[V]) {
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const uint32_t key = key_of<S>(x[k]);
    m = key > m ? key : m;
  }
  return m;
}

// Max over each group of G consecutive lanes (G a power of two <= 32), in every lane of the group:
// one redux instruction for a whole warp (sm_80+), shuffles for smaller groups.
template <int G>
__device__ __forceinline__ uint32_t shuffle_max(uint32_t v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) {
    const uint32_t w = __shfl_xor_sync(kFull, v, o);
    v = w > v ? w : v;
  }
  return v;
}

template <int G>
__device__ __forceinline__ uint32_t group_max(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (G == 32) return __reduce_max_sync(kFull, v);
  else return shuffle_max<G>(v);
#else
  return shuffle_max<G>(v);
#endif
}

__device__ __forceinline__ uint32_t warp_max(uint32_t v) { return group_max<32>(v); }

// Max over the block (all threads call it; the result is valid in thread 0).
__device__ __forceinline__ uint32_t block_max(uint32_t v, uint32_t* smem /* kThreads/32 words */) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v = smem[w] > v ? smem[w] : v;
  }
  return v;
}

// Folds a non-negative, NaN-free amax key into a grid cell: by atomicMax on the bits, or a plain max
// when the caller saw every element of the cell (no other thread touches it).
__device__ __forceinline__ void fold_cell(float* cell, uint32_t key, bool exclusive) {
  unsigned int* p = reinterpret_cast<unsigned int*>(cell);
  if (exclusive) {
    const unsigned int old = *p;
    *p = key > old ? key : old;
  } else {
    atomicMax(p, key);
  }
}

__device__ __forceinline__ void fold_tensor_amax(uint32_t& a, float* amax, const Task* tasks, uint32_t t,
                                                 uint32_t n, uint32_t* red) {
  const uint32_t next = t + gridDim.x;
  if (next < n && tasks[next].job == tasks[t].job) return;
  const uint32_t m = block_max(a, red);
  if (threadIdx.x == 0 && m) atomicMax(reinterpret_cast<unsigned int*>(amax), m);
  a = 0;
}

}  // namespace fpg::cuda::fp8::dev
