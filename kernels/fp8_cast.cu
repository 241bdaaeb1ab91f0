// The cast pass of the batched copy-back: quantizes every job's fragment with its scale grids
// (fp8/shard.h step 4, equal to fp8::cast_fragment bit for bit): q = encode(load(x) * scale) with the
// CPU's saturating encoder (the cvt instruction pairwise, equal to it); scale = the cell's fp32
// scale, or 2^(127-e) for MX.
//
// One kernel per mode (fp8_launch.h), input type, vector width and format, so that the streaming
// modes need few registers: 4 CTAs of 256 threads per SM, each thread with 8 16-byte loads in flight
// (bf16: 4), strided by the block so that every load instruction of a warp reads 512 contiguous
// bytes. Items are vectors of V elements along rows and V divides K (make_device_job), so item i of a
// task starts at flat element gbase + i * V: no division per item except for 2-D grids.
// Delayed jobs with an amax grid fold this step's amax in the same pass (tensor mode: a block max
// per job and CTA, one atomic).
#include <string>

#include "core/error.h"
#include "fp8/blockwise.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_launch.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;

// Where the fp32 scale of a row-block vector comes from (rows and fused modes): the block is 32
// (MX) or 128 (1x128) elements.
template <bool MX>
constexpr int block_shift() {
  return MX ? 5 : 7;
}

// Tensor mode: one scale; `a` collects the amax when `fold` (delayed).
template <Format F, class S, int V>
__device__ void tensor_task(const DeviceJob& j, uint64_t first, uint32_t n, bool fold, uint32_t& a) {
  using T = typename S::T;
  const float s = j.scale[0];
  float sv[V];
#pragma unroll
  for (int k = 0; k < V; ++k) sv[k] = s;
  stream_items<S, V, loads_in_flight<S, V>()>(
      j, first_row(j) * j.K + first * V, n, [&](const T(&x)[V], uint64_t g, uint32_t mask, bool) {
        if (!mask) return;
        uint8_t q[V];
        encode_vec<F, S, V>(x, sv, q);
        store_vec<V>(j.out, j.start, g, mask, q);
        if (fold) {
          const uint32_t m = vec_key_max<S, V>(x);  // 0 outside the fragment
          a = m > a ? m : a;
        }
      });
}

// Rows mode: the scale of the row block holding the vector (flat cell g >> shift). Tiles mode
// (128x128, K % 128 == 0): the cell by a division.
template <Format F, class S, int V, bool MX, bool Tiles = false>
__device__ void rows_task(const DeviceJob& j, uint64_t first, uint32_t n) {
  using T = typename S::T;
  stream_items<S, V, loads_in_flight<S, V>()>(
      j, first_row(j) * j.K + first * V, n, [&](const T(&x)[V], uint64_t g, uint32_t mask, bool) {
        if (!mask) return;
        uint64_t cell;
        if constexpr (Tiles) {
          uint64_t r, c;
          divmod(g, j.K, r, c);
          cell = (r >> 7) * j.grid_cols + (c >> 7);
        } else {
          cell = g >> block_shift<MX>();
        }
        const float s = MX ? fpg::fp8::mx_exp2f_rcp(__ldg(j.e8m0 + cell)) : __ldg(j.scale + cell);
        float sv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) sv[k] = s;
        uint8_t q[V];
        encode_vec<F, S, V>(x, sv, q);
        store_vec<V>(j.out, j.start, g, mask, q);
      });
}

// Generic mode: any main grid (a division per vector for 2-D grids) and MX columnwise outputs.
template <Format F, class S, int V>
__device__ void generic_task(const DeviceJob& j, uint64_t first, uint32_t n) {
  using T = typename S::T;
  constexpr int U = 4;
  const uint64_t K = j.K, gbase = first_row(j) * K + first * V;
  const bool mx = j.scaling == static_cast<uint8_t>(Scaling::mxfp8);
  const bool row = j.has_row && j.out, col = j.has_col && j.out_col;
  for (uint32_t base = threadIdx.x; base < n; base += blockDim.x * U) {
    T x[U][V];
    uint32_t mask[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t i = base + u * blockDim.x;
      mask[u] = i < n ? load_vec<S, V>(j, gbase + uint64_t{i} * V, x[u]) : 0u;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!mask[u]) continue;
      const uint64_t g = gbase + uint64_t{base + u * blockDim.x} * V;
      uint64_t r, c;
      divmod(g, K, r, c);
      if (row) {
        const uint64_t cell = main_cell(j, r, c);
        const float s = mx ? fpg::fp8::mx_exp2f_rcp(j.e8m0[cell]) : j.scale[cell];
        float sv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) sv[k] = s;
        uint8_t q[V];
        encode_vec<F, S, V>(x[u], sv, q);
        store_vec<V>(j.out, j.start, g, mask[u], q);
      }
      if (col) {
        const uint8_t* e = j.e8m0_col + (r >> 5) * K + c;
        float sv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) sv[k] = fpg::fp8::mx_exp2f_rcp(e[k]);
        uint8_t q[V];
        encode_vec<F, S, V>(x[u], sv, q);
        store_vec<V>(j.out_col, j.start, g, mask[u], q);
      }
    }
  }
}

// One pass over whole row blocks (make_fused_job): the G = block / V lanes that hold a block's
// vectors reduce its amax (group_max), the FPG_HD rules give its scale, the first of them writes the
// block's amax and scale, and all cast. A block lies in one warp access: tasks start at multiples of
// 32 items and K is a multiple of the block. In a full round each lane works out ONE scale, lane
// (group start + u) that of its group's vector u (U <= G), and the group reads them by shuffles:
// the scale rules, one per vector, were most of a round's instructions.
template <Format F, class S, int V, bool MX>
__device__ void fused_task(const DeviceJob& j, uint64_t first, uint32_t n) {
  using T = typename S::T;
  constexpr int shift = block_shift<MX>(), G = (1 << shift) / V;  // lanes per block
  constexpr int U = loads_in_flight<S, V>();
  if constexpr (G <= 32) {
    static_assert(U <= G, "each lane of a group works out at most one of its U scales");
    const int lane = threadIdx.x & 31;
    // The scale of the block at flat element g with amax key m; `head` writes its cells.
    auto scale_of = [&](uint32_t m, uint64_t g, bool head) {
      const float amax = bits_float(m);
      const uint64_t cell = g >> shift;
      float s;
      if constexpr (MX) {
        const uint8_t e = fpg::fp8::mx_scale(amax, F, static_cast<fpg::fp8::MxRule>(j.mx_rule));
        s = fpg::fp8::mx_exp2f_rcp(e);
        if (head && j.e8m0_out) j.e8m0_out[cell] = e;
      } else {
        s = fpg::fp8::blockwise_scale(amax, F, j.pow2, j.epsilon, static_cast<Input>(j.input));
        if (head && j.scale_out) j.scale_out[cell] = s;
        if (head && j.scale_inv_out) j.scale_inv_out[cell] = fpg::fp8::scale_inv_of(s);
      }
      if (head && j.amax) fold_cell(j.amax + cell, m, false);
      return s;
    };
    auto cast = [&](const T(&x)[V], float s, uint64_t g, uint32_t mask) {
      float sv[V];
#pragma unroll
      for (int k = 0; k < V; ++k) sv[k] = s;
      uint8_t q[V];
      encode_vec<F, S, V>(x, sv, q);
      store_vec<V>(j.out, j.start, g, mask, q);
    };
    stream_rounds<S, V, U>(
        j, first_row(j) * j.K + first * V, n,
        [&](const T(&x)[U][V], uint64_t g0) {
          uint32_t m[U];
#pragma unroll
          for (int u = 0; u < U; ++u) m[u] = group_max<G>(vec_key_max<S, V>(x[u]));
          const int mine = lane % G;  // the vector whose scale this lane works out, if < U
          uint32_t key = m[0];
#pragma unroll
          for (int u = 1; u < U; ++u) key = mine == u ? m[u] : key;
          const float s = mine < U ? scale_of(key, g0 + uint64_t(mine) * kThreads * V, true) : 1.0f;
          const int group = lane & ~(G - 1);
#pragma unroll
          for (int u = 0; u < U; ++u)
            cast(x[u], __shfl_sync(kFull, s, group + u), g0 + u * kThreads * V, full_mask<V>());
        },
        [&](const T(&x)[V], uint64_t g, uint32_t mask, bool) {
          const uint32_t m = group_max<G>(vec_key_max<S, V>(x));  // elements outside the fragment: 0
          if (!mask) return;  // a block is wholly inside the fragment or wholly outside
          cast(x, scale_of(m, g, lane % G == 0), g, mask);
        });
  }
}

template <int Mode, Format F, class S, int V>
__global__ void __launch_bounds__(kThreads, Mode == static_cast<int>(CastMode::generic) ? kMinBlocks : kMinBlocksFast)
    cast_kernel(const DeviceJob* __restrict__ jobs, const Task* __restrict__ tasks, uint32_t n) {
  constexpr auto M = static_cast<CastMode>(Mode);
  __shared__ uint32_t red[kThreads / 32];
  uint32_t a = 0;
  for (uint32_t t = blockIdx.x; t < n; t += gridDim.x) {
    const Task task = tasks[t];
    const DeviceJob& j = jobs[task.job];
    if constexpr (M == CastMode::tensor) {
      const bool fold = j.scaling == static_cast<uint8_t>(Scaling::delayed) && j.amax;  // uniform
      tensor_task<F, S, V>(j, task.first, task.items, fold, a);
      if (fold) fold_tensor_amax(a, j.amax, tasks, t, n, red);
    } else if constexpr (M == CastMode::rows || M == CastMode::rows_mx || M == CastMode::tiles) {
      rows_task<F, S, V, M == CastMode::rows_mx, M == CastMode::tiles>(j, task.first, task.items);
    } else if constexpr (M == CastMode::fused || M == CastMode::fused_mx) {
      fused_task<F, S, V, M == CastMode::fused_mx>(j, task.first, task.items);
    } else {
      generic_task<F, S, V>(j, task.first, task.items);
    }
  }
}

using CastFn = void (*)(const DeviceJob*, const Task*, uint32_t);

template <int Mode, Format F, class S>
CastFn pick_vec(bool vec) {
  constexpr int W = 16 / static_cast<int>(sizeof(typename S::T));
  constexpr auto M = static_cast<CastMode>(Mode);
  // A 1x128 block of single elements does not fit a warp access: fused 1x128 needs vectors
  // (make_fused_job), and the host never picks this instantiation.
  if constexpr (M == CastMode::fused) return vec ? &cast_kernel<Mode, F, S, W> : nullptr;
  else return vec ? &cast_kernel<Mode, F, S, W> : &cast_kernel<Mode, F, S, 1>;
}

template <int Mode, Format F>
CastFn pick_input(const LaunchGroup& g) {
  using fpg::fp8::Input;
  switch (static_cast<Input>(g.input)) {
    case Input::f32: return pick_vec<Mode, F, SrcF32>(g.vec);
    case Input::bf16: return pick_vec<Mode, F, SrcBf16>(g.vec);
    case Input::f32_as_bf16: return pick_vec<Mode, F, SrcF32AsBf16>(g.vec);
  }
  return nullptr;
}

template <int Mode>
CastFn pick_format(const LaunchGroup& g) {
  return g.format == static_cast<uint8_t>(Format::e4m3) ? pick_input<Mode, Format::e4m3>(g)
                                                         : pick_input<Mode, Format::e5m2>(g);
}

CastFn cast_kernel_for(const LaunchGroup& g) {
  switch (static_cast<CastMode>(g.mode)) {
    case CastMode::tensor: return pick_format<static_cast<int>(CastMode::tensor)>(g);
    case CastMode::rows: return pick_format<static_cast<int>(CastMode::rows)>(g);
    case CastMode::rows_mx: return pick_format<static_cast<int>(CastMode::rows_mx)>(g);
    case CastMode::tiles: return pick_format<static_cast<int>(CastMode::tiles)>(g);
    case CastMode::generic: return pick_format<static_cast<int>(CastMode::generic)>(g);
    case CastMode::fused: return pick_format<static_cast<int>(CastMode::fused)>(g);
    case CastMode::fused_mx: return pick_format<static_cast<int>(CastMode::fused_mx)>(g);
    case CastMode::fused_tiles:
    case CastMode::fused_mx_tiles: return nullptr;  // launch_fused_tiles
  }
  return nullptr;
}

}  // namespace

void launch_cast(const DeviceJob* jobs, const Task* tasks, const std::vector<LaunchGroup>& groups,
                 cudaStream_t stream) {
  for (const LaunchGroup& g : groups) {
    if (g.count == 0) continue;
    if (g.mode == static_cast<uint8_t>(CastMode::fused_tiles) ||
        g.mode == static_cast<uint8_t>(CastMode::fused_mx_tiles)) {
      launch_fused_tiles(jobs, tasks, g, stream);
      continue;
    }
    const CastFn k = cast_kernel_for(g);
    if (!k) throw InternalError("fp8: no cast kernel for mode " + std::to_string(g.mode));
    const int blocks = persistent_blocks(reinterpret_cast<const void*>(k), kThreads);
    const uint32_t grid = g.count < static_cast<uint32_t>(blocks) ? g.count : static_cast<uint32_t>(blocks);
    k<<<grid, kThreads, 0, stream>>>(jobs, tasks + g.first, g.count);
    FPG_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace fpg::cuda::fp8
