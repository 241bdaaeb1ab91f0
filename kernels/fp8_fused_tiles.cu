// One-pass quantize of whole 2-D tiles (make_fused_job, fused == kFusedTiles): a CTA owns one tile,
// reads it once into registers, reduces its amaxes, computes the scales with the CPU's FPG_HD rules
// (blockwise_scale, mx_scale), writes them, and casts from the registers. Equal to partial amax +
// compute_scales + cast of the fragment bit for bit.
//
// blockwise 128x128: a tile is one 128-row x 128-column cell; one block max, one scale.
// MX rowwise + columnwise: a tile is a 32-row band x 512 columns; rowwise 1x32 amaxes by shuffles
// among the lanes of a block, columnwise 32x1 amaxes by a max down the thread's rows, then across
// the warps through shared memory (one thread per column computes the E8M0 scale).
//
// Layout: a 128-column piece of a row is L = 128 / V lanes (fp32: a warp, bf16: half a warp), so a
// warp access covers RW = 32 / L rows; warp w, access i, sub-row s reads row i*8*RW + w*RW + s of the
// tile. Every thread holds 64 values (16 fp32 or 8 bf16 16-byte loads in flight); 128 registers,
// 2 CTAs of 256 threads per SM. Fragments hold whole tiles' rows (start and end on band boundaries,
// or the end of the tensor); the column edge (K not a multiple of the tile) and the last band's
// rows past M read as absent. Vectors only (make_fused_job requires them).
#include "fp8/blockwise.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_launch.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;

template <bool MX, Format F, class S, int V>
__global__ void __launch_bounds__(kThreads, 2)
    fused_tile_kernel(const DeviceJob* __restrict__ jobs, const Task* __restrict__ tasks, uint32_t n) {
  using T = typename S::T;
  constexpr int BR = MX ? 32 : 128;           // tile rows
  constexpr int P = MX ? 4 : 1;               // 128-column pieces per tile
  constexpr int L = 128 / V, RW = 32 / L;     // lanes per piece, rows per warp access
  constexpr int NR = BR / (kThreads / 32 * RW);  // row accesses per thread and piece
  constexpr int W = 128 * P;                  // tile columns
  __shared__ uint32_t red[kThreads / 32];
  __shared__ float bcast;
  __shared__ uint32_t colred[MX ? kThreads / 32 : 1][MX ? W : 1];
  __shared__ float colscale[MX ? W : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane / L, lc = (lane % L) * V;

  for (uint32_t t = blockIdx.x; t < n; t += gridDim.x) {
    const Task task = tasks[t];
    const DeviceJob& j = jobs[task.job];
    const uint64_t K = j.K, ntc = (K + W - 1) / W;
    const uint64_t rend = (j.start + j.count) / K + ((j.start + j.count) % K ? 1 : 0);
    const bool row = j.has_row, col = MX && j.has_col;
    for (uint32_t it = 0; it < task.items; ++it) {
      const uint64_t tile = task.first + it, band = tile / ntc, tc = tile - band * ntc;
      const uint64_t r0 = first_row(j) + band * BR, c0 = tc * W;

      T x[NR][P][V];
      bool ok[NR][P];
#pragma unroll
      for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int p = 0; p < P; ++p) {
          const uint64_t r = r0 + i * (kThreads / 32 * RW) + warp * RW + sub, c = c0 + p * 128 + lc;
          ok[i][p] = r < rend && c < K;  // K % V == 0: a vector is wholly in or out
          if (ok[i][p]) {
            load_raw<S, V>(j, r * K + c, x[i][p]);
          } else {
#pragma unroll
            for (int k = 0; k < V; ++k) x[i][p][k] = T(0);  // key 0: neutral for the max
          }
        }

      if constexpr (!MX) {
        uint32_t m = 0;
#pragma unroll
        for (int i = 0; i < NR; ++i)
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const uint32_t key = key_of<S>(x[i][0][k]);
            m = key > m ? key : m;
          }
        m = block_max(m, red);
        if (threadIdx.x == 0) {
          const float s = fpg::fp8::blockwise_scale(bits_float(m), F, j.pow2, j.epsilon, static_cast<Input>(j.input));
          const uint64_t cell = (r0 >> 7) * j.grid_cols + (c0 >> 7);
          if (j.scale_out) j.scale_out[cell] = s;
          if (j.scale_inv_out) j.scale_inv_out[cell] = fpg::fp8::scale_inv_of(s);
          if (j.amax) fold_cell(j.amax + cell, m, true);  // the CTA saw the whole cell
          bcast = s;
        }
        __syncthreads();
        float sv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) sv[k] = bcast;
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          if (!ok[i][0] || !j.out) continue;
          const uint64_t g = (r0 + i * (kThreads / 32 * RW) + warp * RW + sub) * K + c0 + lc;
          uint8_t q[V];
          encode_vec<F, S, V>(x[i][0], sv, q);
          store_vec<V>(j.out, j.start, g, full_mask<V>(), q);
        }
      } else {
        constexpr int G = 32 / V;  // lanes per 1x32 block
        if (row) {
#pragma unroll
          for (int i = 0; i < NR; ++i)
#pragma unroll
            for (int p = 0; p < P; ++p) {
              uint32_t m = 0;
#pragma unroll
              for (int k = 0; k < V; ++k) {
                const uint32_t key = key_of<S>(x[i][p][k]);
                m = key > m ? key : m;
              }
#pragma unroll
              for (int o = G / 2; o > 0; o >>= 1) {  // all lanes: absent vectors hold key 0
                const uint32_t w = __shfl_xor_sync(kFull, m, o);
                m = w > m ? w : m;
              }
              if (!ok[i][p]) continue;  // a 1x32 block is wholly present or absent
              const uint64_t r = r0 + i * (kThreads / 32 * RW) + warp * RW + sub, c = c0 + p * 128 + lc;
              const uint8_t e = fpg::fp8::mx_scale(bits_float(m), F, static_cast<fpg::fp8::MxRule>(j.mx_rule));
              if (lane % G == 0) {
                const uint64_t cell = r * j.grid_cols + (c >> 5);
                if (j.e8m0_out) j.e8m0_out[cell] = e;
                if (j.amax) fold_cell(j.amax + cell, m, true);
              }
              if (j.out) {
                float sv[V];
                const float s = fpg::fp8::mx_exp2f_rcp(e);
#pragma unroll
                for (int k = 0; k < V; ++k) sv[k] = s;
                uint8_t q[V];
                encode_vec<F, S, V>(x[i][p], sv, q);
                store_vec<V>(j.out, j.start, r * K + c, full_mask<V>(), q);
              }
            }
        }
        if (col) {
          __syncthreads();  // the previous tile's readers of colred / colscale are done
#pragma unroll
          for (int p = 0; p < P; ++p)
#pragma unroll
            for (int k = 0; k < V; ++k) {
              uint32_t m = 0;
#pragma unroll
              for (int i = 0; i < NR; ++i) {
                const uint32_t key = key_of<S>(x[i][p][k]);
                m = key > m ? key : m;
              }
              if constexpr (RW == 2) {
                const uint32_t w = __shfl_xor_sync(kFull, m, 16);
                m = w > m ? w : m;
              }
              if (sub == 0) colred[warp][p * 128 + lc + k] = m;
            }
          __syncthreads();
          const uint64_t cband = r0 >> 5;
          for (int c = threadIdx.x; c < W; c += kThreads) {
            uint32_t m = 0;
#pragma unroll
            for (int w = 0; w < kThreads / 32; ++w) m = colred[w][c] > m ? colred[w][c] : m;
            const uint8_t e = fpg::fp8::mx_scale(bits_float(m), F, static_cast<fpg::fp8::MxRule>(j.mx_rule));
            colscale[c] = fpg::fp8::mx_exp2f_rcp(e);
            if (c0 + c < K) {
              const uint64_t cell = cband * K + c0 + c;
              if (j.e8m0_col_out) j.e8m0_col_out[cell] = e;
              if (j.amax_col) fold_cell(j.amax_col + cell, m, true);
            }
          }
          __syncthreads();
          if (j.out_col) {
#pragma unroll
            for (int i = 0; i < NR; ++i)
#pragma unroll
              for (int p = 0; p < P; ++p) {
                if (!ok[i][p]) continue;
                const uint64_t r = r0 + i * (kThreads / 32 * RW) + warp * RW + sub, c = c0 + p * 128 + lc;
                float sv[V];
#pragma unroll
                for (int k = 0; k < V; ++k) sv[k] = colscale[p * 128 + lc + k];
                uint8_t q[V];
                encode_vec<F, S, V>(x[i][p], sv, q);
                store_vec<V>(j.out_col, j.start, r * K + c, full_mask<V>(), q);
              }
          }
        }
      }
    }
  }
}

template <bool MX, Format F, class S>
FusedTileFn pick_vec(bool vec) {
  constexpr int W = 16 / static_cast<int>(sizeof(typename S::T));
  return vec ? &fused_tile_kernel<MX, F, S, W> : nullptr;  // make_fused_job requires vectors
}

template <bool MX, Format F>
FusedTileFn pick_input(const LaunchGroup& g) {
  using fpg::fp8::Input;
  switch (static_cast<Input>(g.input)) {
    case Input::f32: return pick_vec<MX, F, SrcF32>(g.vec);
    case Input::bf16: return pick_vec<MX, F, SrcBf16>(g.vec);
    case Input::f32_as_bf16: return pick_vec<MX, F, SrcF32AsBf16>(g.vec);
  }
  return nullptr;
}

template <bool MX>
FusedTileFn pick_format(const LaunchGroup& g) {
  return g.format == static_cast<uint8_t>(Format::e4m3) ? pick_input<MX, Format::e4m3>(g)
                                                         : pick_input<MX, Format::e5m2>(g);
}

}  // namespace

FusedTileFn fused_tile_kernel_for(const LaunchGroup& g) {
  if (g.mode == static_cast<uint8_t>(CastMode::fused_tiles)) return pick_format<false>(g);
  if (g.mode == static_cast<uint8_t>(CastMode::fused_mx_tiles)) return pick_format<true>(g);
  return nullptr;
}

}  // namespace fpg::cuda::fp8
