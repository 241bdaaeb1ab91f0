// The cast pass of the batched copy-back: one launch quantizes every job's fragment with its scale
// grids (fp8/shard.h step 4, equal to fp8::cast_fragment bit for bit): q = encode(load(x) * scale)
// with the CPU's saturating encoder (the cvt instruction pairwise, equal to it), scale = the cell's fp32 scale or 2^(127-e) for MX.
//
// Each thread has kU 16-byte loads in flight (strided by the block, so every load instruction of a
// warp reads 512 contiguous bytes) before it encodes and stores. Delayed jobs that carry an amax
// grid fold this step's amax in the same pass (a block max per task, one atomic per CTA and grid).
#include "fp8/blockwise.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_launch.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;

constexpr int kU = 4;

template <Format F, class S, int V>
__device__ uint32_t cast_task(const DeviceJob& j, uint64_t first, uint32_t n) {
  using T = typename S::T;
  const uint64_t K = j.K, ncv = (K + V - 1) / V, r0 = first_row(j);
  const bool pt = per_tensor(j);
  const bool mx = j.scaling == static_cast<uint8_t>(Scaling::mxfp8);
  const bool row = j.has_row && j.out, col = j.has_col && j.out_col;
  const bool fold = j.scaling == static_cast<uint8_t>(Scaling::delayed) && j.amax;
  const float tensor_scale = row && pt ? j.scale[0] : 0.0f;
  uint32_t amax = 0;
  for (uint32_t base = threadIdx.x; base < n; base += blockDim.x * kU) {
    T x[kU][V];
    uint32_t mask[kU];
    uint64_t r[kU], c[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const uint32_t i = base + u * blockDim.x;
      mask[u] = 0;
      r[u] = c[u] = 0;
      if (i < n) {
        uint64_t q, rem;
        divmod(first + i, ncv, q, rem);
        r[u] = r0 + q;
        c[u] = rem * V;
        mask[u] = load_vec<S, V>(j, r[u] * K + c[u], x[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (!mask[u]) continue;
      const uint64_t g = r[u] * K + c[u];
      if (row) {
        float s = tensor_scale;
        if (!pt) {
          const uint64_t cell = main_cell(j, r[u], c[u]);
          s = mx ? fpg::fp8::mx_exp2f_rcp(j.e8m0[cell]) : j.scale[cell];
        }
        float sv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) sv[k] = s;
        uint8_t q[V];
        encode_vec<F, S, V>(x[u], sv, q);
        store_vec<V>(j.out, j.start, g, mask[u], q);
      }
      if (col) {
        const uint8_t* e = j.e8m0_col + (r[u] >> 5) * K + c[u];
        float sv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) sv[k] = fpg::fp8::mx_exp2f_rcp(e[k]);
        uint8_t q[V];
        encode_vec<F, S, V>(x[u], sv, q);
        store_vec<V>(j.out_col, j.start, g, mask[u], q);
      }
      if (fold) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const uint32_t key = key_of<S>(x[u][k]);  // 0 outside the fragment
          amax = key > amax ? key : amax;
        }
      }
    }
  }
  return amax;
}

// One pass over whole row blocks (make_fused_job): the G = block / V lanes that hold a block's
// vectors reduce its amax by shuffles, compute its scale with the FPG_HD rules, the first of them
// writes the amax and scale, and all cast.
template <Format F, class S, int V>
__device__ void fused_task(const DeviceJob& j, uint64_t first, uint32_t n) {
  using T = typename S::T;
  const uint64_t K = j.K, ncv = K / V, r0 = first_row(j);
  const bool mx = j.scaling == static_cast<uint8_t>(Scaling::mxfp8);
  const int G = static_cast<int>((1u << j.block_shift) / V);  // lanes per block, <= 32
  const int lane = threadIdx.x & 31;
  for (uint32_t b0 = 0; b0 < n; b0 += blockDim.x * kU) {  // uniform: the shuffles need every lane
    T x[kU][V];
    uint32_t mask[kU];
    uint64_t r[kU], c[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const uint32_t i = b0 + u * blockDim.x + threadIdx.x;
      mask[u] = 0;
      r[u] = c[u] = 0;
#pragma unroll
      for (int k = 0; k < V; ++k) x[u][k] = T(0);
      if (i < n) {
        uint64_t q, rem;
        divmod(first + i, ncv, q, rem);
        r[u] = r0 + q;
        c[u] = rem * V;
        mask[u] = load_vec<S, V>(j, r[u] * K + c[u], x[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      uint32_t m = 0;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const uint32_t key = key_of<S>(x[u][k]);
        m = key > m ? key : m;
      }
      for (int o = G / 2; o > 0; o >>= 1) {
        const uint32_t w = __shfl_xor_sync(kFull, m, o);
        m = w > m ? w : m;
      }
      if (!mask[u]) continue;  // a block is wholly inside the fragment or wholly outside
      const float amax = bits_float(m);
      const uint64_t cell = main_cell(j, r[u], c[u]);
      float s;
      if (mx) {
        const uint8_t e = fpg::fp8::mx_scale(amax, F, static_cast<fpg::fp8::MxRule>(j.mx_rule));
        s = fpg::fp8::mx_exp2f_rcp(e);
        if (lane % G == 0 && j.e8m0_out) j.e8m0_out[cell] = e;
      } else {
        s = fpg::fp8::blockwise_scale(amax, F, j.pow2, j.epsilon, static_cast<Input>(j.input));
        if (lane % G == 0) {
          if (j.scale_out) j.scale_out[cell] = s;
          if (j.scale_inv_out) j.scale_inv_out[cell] = fpg::fp8::scale_inv_of(s);
        }
      }
      if (lane % G == 0 && j.amax) fold_cell(j.amax + cell, m, false);
      float sv[V];
#pragma unroll
      for (int k = 0; k < V; ++k) sv[k] = s;
      uint8_t q[V];
      encode_vec<F, S, V>(x[u], sv, q);
      store_vec<V>(j.out, j.start, r[u] * K + c[u], mask[u], q);
    }
  }
}

__global__ void __launch_bounds__(kThreads, kMinBlocks) cast_kernel(const DeviceJob* __restrict__ jobs,
                                                        const Task* __restrict__ tasks, uint32_t n) {
  __shared__ uint32_t red[kThreads / 32];
  unsigned int* carry = nullptr;  // thread 0: the delayed amax being folded, and its value
  uint32_t carry_v = 0;
  for (uint32_t t = blockIdx.x; t < n; t += gridDim.x) {
    const Task task = tasks[t];
    const DeviceJob& j = jobs[task.job];
    uint32_t a = 0;
    if (j.fused) {
      dispatch_job(j, [&](auto f, auto src, auto v) {
        fused_task<decltype(f)::value, decltype(src), decltype(v)::value>(j, task.first, task.items);
      });
      continue;
    }
    dispatch_job(j, [&](auto f, auto src, auto v) {
      a = cast_task<decltype(f)::value, decltype(src), decltype(v)::value>(j, task.first, task.items);
    });
    if (j.scaling == static_cast<uint8_t>(Scaling::delayed) && j.amax) {  // uniform over the block
      a = block_max(a, red);
      if (threadIdx.x == 0) {
        unsigned int* p = reinterpret_cast<unsigned int*>(j.amax);
        if (p == carry) {
          carry_v = a > carry_v ? a : carry_v;
        } else {
          if (carry) atomicMax(carry, carry_v);
          carry = p;
          carry_v = a;
        }
      }
    }
  }
  if (threadIdx.x == 0 && carry) atomicMax(carry, carry_v);
}

}  // namespace

void launch_cast(const DeviceJob* jobs, const Task* tasks, uint32_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = persistent_blocks(reinterpret_cast<const void*>(&cast_kernel), kThreads);
  cast_kernel<<<n < static_cast<uint32_t>(blocks) ? n : blocks, kThreads, 0, stream>>>(jobs, tasks, n);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda::fp8
