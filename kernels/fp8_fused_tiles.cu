// One-pass quantize of whole 2-D tiles (make_fused_job, fused == kFusedTiles): a CTA copies a tile
// once into shared memory, reduces its amaxes, computes the scales with the CPU's FPG_HD rules
// (blockwise_scale, mx_scale), writes them, and casts from shared memory. Equal to partial amax +
// compute_scales + cast of the fragment bit for bit.
//
// blockwise 128x128: a tile is one 128-row x 128-column cell; one block max, one scale.
// MX rowwise + columnwise: a tile is a 32-row band x 512 columns; columnwise 32x1 amaxes by one
// thread per column down the tile, rowwise 1x32 amaxes by shuffles among the lanes of a block.
//
// Why a pipeline in shared memory: a tile's scale needs all of it before any byte is cast, so a CTA
// that loads, then reduces, then casts leaves HBM idle while it computes. Here one CTA per SM (16
// warps) has NS stages of 192 KiB (3 fp32 tiles, 6 bf16 ones) that cp.async fills without holding
// registers; a stage is refilled as soon as its tile has been read into registers, so NS tiles are
// on their way while the CTA reduces and casts the one in registers. Measured against a D2D copy
// (BENCHMARKS.md, session 4): 0.62 (128x128) and 0.61 (MX both) of it, from 0.53 and 0.50 with
// the tile held in registers; 3 single-tile CTAs per SM without the pipeline gave 0.73 and 0.52.
// What is left is issue latency: 16 warps at ~11 cycles per instruction each.
//
// Tile layout in a stage: row-major, W columns; vector v (16 bytes, V elements) of the tile is row
// v / (W/V), columns (v % (W/V)) * V; thread t handles vectors t, t + 512, ... so that each warp
// reads and writes contiguous runs of a row. One tile per task (DeviceBatch makes them so); a CTA
// takes tasks blockIdx.x, blockIdx.x + gridDim.x, ... Fragments hold whole tiles' rows (start and
// end on band boundaries, or the end of the tensor); the column edge (K not a multiple of the tile)
// and the last band's rows past M are zero-filled (key 0, neutral for the max) and not written.
// Vectors only (make_fused_job requires them).
#include <string>

#include "core/error.h"
#include "fp8/blockwise.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_launch.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;

// 16 bytes global -> shared without staging in registers (sm_80+); a commit group per tile; the
// wait until at most `Pending` groups are still in flight.
__device__ __forceinline__ void copy_async_16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

constexpr int kTileThreads = 512;         // one CTA per SM: 16 warps reduce and cast
constexpr size_t kTileSmem = 192 * 1024;  // the stages: 3 fp32 tiles, 6 bf16 ones

template <bool MX>
struct TileShape {
  static constexpr int rows = MX ? 32 : 128;
  static constexpr int cols = static_cast<int>(fused_tile_cols(MX));
};

template <bool MX, class S>
constexpr size_t tile_bytes() {
  return static_cast<size_t>(TileShape<MX>::rows) * TileShape<MX>::cols * sizeof(typename S::T);
}
template <bool MX, class S>
constexpr int tile_stages() {
  return static_cast<int>(kTileSmem / tile_bytes<MX, S>());
}

// This thread's part of one tile: its vectors i = 0 .. PER-1 are vector i * kTileThreads + tid of
// the tile, all in one column run (kTileThreads is a multiple of the vectors per row), rows
// row + i * RS. Set up once per tile, so that per vector there are only adds and one compare.
struct TileWalk {
  uint64_t r0, c0;  // the tile's first tensor row and column
  uint64_t row;     // this thread's first tensor row; its rows step by RS
  uint64_t rend;    // the fragment's rows end here
  uint64_t g;       // flat index of this thread's first vector
  uint64_t step;    // RS * K: the flat step from one of its vectors to the next
  bool col_ok;      // the thread's columns are inside K
  __device__ bool has(int i, int rs) const { return col_ok && row + static_cast<uint64_t>(i) * rs < rend; }
};

template <int BR, int W, int V>
__device__ __forceinline__ TileWalk walk_of(const DeviceJob& j, uint64_t tile_id) {
  constexpr int VPR = W / V, RS = kTileThreads / VPR;
  uint64_t band, tcol, rows, rest;
  divmod(tile_id, (j.K + W - 1) / W, band, tcol);
  divmod(j.start + j.count, j.K, rows, rest);
  TileWalk w;
  w.r0 = first_row(j) + band * BR;
  w.c0 = tcol * W;
  w.row = w.r0 + threadIdx.x / VPR;
  w.rend = rows + (rest ? 1 : 0);
  const uint64_t c = w.c0 + (threadIdx.x % VPR) * V;
  w.col_ok = c < j.K;
  w.g = w.row * j.K + c;
  w.step = static_cast<uint64_t>(RS) * j.K;
  return w;
}

template <bool MX, Format F, class S, int V>
__global__ void __launch_bounds__(kTileThreads, 1)
    fused_tile_kernel(const DeviceJob* __restrict__ jobs, const Task* __restrict__ tasks, uint32_t n) {
  using T = typename S::T;
  constexpr int BR = TileShape<MX>::rows, W = TileShape<MX>::cols, NS = tile_stages<MX, S>();
  constexpr int VPR = W / V, NV = BR * VPR, PER = NV / kTileThreads, RS = kTileThreads / VPR;
  static_assert(kTileThreads % VPR == 0 && NV % kTileThreads == 0, "a thread's vectors share columns");
  extern __shared__ uint4 stage_words[];  // NS tiles of NV vectors, BR x W values each
  __shared__ uint32_t red[32];
  __shared__ float bcast;
  __shared__ float colscale[MX ? W : 1];
  const int lane = threadIdx.x & 31;

  // Starts copying this CTA's k-th tile (task blockIdx.x + k * gridDim.x; one tile per task) into
  // stage k % NS; the parts of the tile outside the tensor are zero-filled (key 0: neutral for the
  // max). A commit group even when there is no tile, so that group k is always tile k.
  auto issue = [&](uint32_t k) {
    const uint32_t t = blockIdx.x + k * gridDim.x;
    if (t < n) {
      const Task task = tasks[t];
      const DeviceJob& j = jobs[task.job];
      const TileWalk w = walk_of<BR, W, V>(j, task.first);
      const T* src = static_cast<const T*>(j.in) + (w.g - j.start);
      uint4* dst = stage_words + static_cast<size_t>(k % NS) * NV + threadIdx.x;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        if (w.has(i, RS)) copy_async_16(dst + i * kTileThreads, src + i * w.step);
        else dst[i * kTileThreads] = make_uint4(0, 0, 0, 0);
      }
    }
    copy_async_commit();
  };

  // Every stage in flight; a stage is refilled as soon as its tile is in registers, so NS tiles are
  // always on their way while the CTA reduces and casts.
#pragma unroll 1
  for (int k = 0; k < NS; ++k) issue(k);
#pragma unroll 1
  for (uint32_t k = 0; blockIdx.x + k * gridDim.x < n; ++k) {
    copy_async_wait<NS - 1>();  // this thread's copies of tile k have landed
    __syncthreads();            // and everyone's (and everyone is past the previous tile's casts)
    const Task task = tasks[blockIdx.x + k * gridDim.x];
    const DeviceJob& j = jobs[task.job];
    const TileWalk w = walk_of<BR, W, V>(j, task.first);
    const uint4* stage = stage_words + static_cast<size_t>(k % NS) * NV;

    if constexpr (MX) {
      if (j.has_col) {  // 32x1 blocks: one thread per column, down the band, from shared memory
        const T* tile = reinterpret_cast<const T*>(stage);
        for (int tc = threadIdx.x; tc < W; tc += kTileThreads) {
          uint32_t m = 0;
#pragma unroll 8
          for (int tr = 0; tr < BR; ++tr) {
            const uint32_t key = key_of<S>(tile[tr * W + tc]);
            m = key > m ? key : m;
          }
          const uint8_t e = fpg::fp8::mx_scale(bits_float(m), F, static_cast<fpg::fp8::MxRule>(j.mx_rule));
          colscale[tc] = fpg::fp8::mx_exp2f_rcp(e);
          if (w.c0 + tc < j.K) {
            const uint64_t cell = (w.r0 >> 5) * j.K + w.c0 + tc;
            if (j.e8m0_col_out) j.e8m0_col_out[cell] = e;
            if (j.amax_col) fold_cell(j.amax_col + cell, m, true);
          }
        }
      }
    }
    T x[PER][V];  // this thread's vectors: vector i is i * kTileThreads + tid of the tile
#pragma unroll
    for (int i = 0; i < PER; ++i) unpack16<S, V>(stage[i * kTileThreads + threadIdx.x], x[i]);
    __syncthreads();  // the stage is read (and colscale written): refill it
    issue(k + NS);

    if constexpr (!MX) {
      uint32_t m = 0;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const uint32_t km = vec_key_max<S, V>(x[i]);
        m = km > m ? km : m;
      }
      m = block_max(m, red);
      if (threadIdx.x == 0) {
        const float s = fpg::fp8::blockwise_scale(bits_float(m), F, j.pow2, j.epsilon, static_cast<Input>(j.input));
        const uint64_t cell = (w.r0 >> 7) * j.grid_cols + (w.c0 >> 7);
        if (j.scale_out) j.scale_out[cell] = s;
        if (j.scale_inv_out) j.scale_inv_out[cell] = fpg::fp8::scale_inv_of(s);
        if (j.amax) fold_cell(j.amax + cell, m, true);  // the CTA saw the whole cell
        bcast = s;
      }
      __syncthreads();
      if (j.out) {
        float sv[V];
#pragma unroll
        for (int q = 0; q < V; ++q) sv[q] = bcast;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
          if (!w.has(i, RS)) continue;
          uint8_t q8[V];
          encode_vec<F, S, V>(x[i], sv, q8);
          store_vec<V>(j.out, j.start, w.g + i * w.step, full_mask<V>(), q8);
        }
      }
    } else {
      constexpr int G = 32 / V;  // lanes per 1x32 block
      static_assert(PER <= G, "each lane of a block works out at most one of its PER scales");
      if (j.has_row) {
        // Each lane works out one scale: lane (block start + i) that of the block's vector i; the
        // block's lanes read them by shuffles (the scale rules per vector were most of the work).
        uint32_t m[PER];
#pragma unroll
        for (int i = 0; i < PER; ++i) m[i] = group_max<G>(vec_key_max<S, V>(x[i]));  // absent vectors: 0
        const int own = lane % G;  // the vector whose scale this lane works out, if < PER
        uint32_t key = m[0];
#pragma unroll
        for (int i = 1; i < PER; ++i) key = own == i ? m[i] : key;
        float s = 1.0f;
        if (own < PER && w.has(own, RS)) {  // a 1x32 block is wholly present or absent
          const uint8_t e = fpg::fp8::mx_scale(bits_float(key), F, static_cast<fpg::fp8::MxRule>(j.mx_rule));
          s = fpg::fp8::mx_exp2f_rcp(e);
          const uint64_t r = w.row + static_cast<uint64_t>(own) * RS;
          const uint64_t cell = r * j.grid_cols + ((w.g - w.row * j.K) >> 5);  // the block's column / 32
          if (j.e8m0_out) j.e8m0_out[cell] = e;
          if (j.amax) fold_cell(j.amax + cell, key, true);
        }
        const int group = lane & ~(G - 1);
#pragma unroll
        for (int i = 0; i < PER; ++i) {
          const float si = __shfl_sync(kFull, s, group + i);
          if (!j.out || !w.has(i, RS)) continue;
          float sv[V];
#pragma unroll
          for (int q = 0; q < V; ++q) sv[q] = si;
          uint8_t q8[V];
          encode_vec<F, S, V>(x[i], sv, q8);
          store_vec<V>(j.out, j.start, w.g + i * w.step, full_mask<V>(), q8);
        }
      }
      if (j.has_col && j.out_col) {
        float sv[V];
        const int tc = static_cast<int>(threadIdx.x % VPR) * V;  // the thread's columns in the tile
#pragma unroll
        for (int q = 0; q < V; ++q) sv[q] = colscale[tc + q];
#pragma unroll
        for (int i = 0; i < PER; ++i) {
          if (!w.has(i, RS)) continue;
          uint8_t q8[V];
          encode_vec<F, S, V>(x[i], sv, q8);
          store_vec<V>(j.out_col, j.start, w.g + i * w.step, full_mask<V>(), q8);
        }
      }
    }
  }
  copy_async_wait<0>();  // no copy outlives the CTA (the trailing groups are empty)
}

using TileKernel = void (*)(const DeviceJob*, const Task*, uint32_t);

struct PickedKernel {
  TileKernel fn = nullptr;
  size_t smem = 0;
};

template <bool MX, Format F, class S>
PickedKernel pick_vec(bool vec) {
  constexpr int W = 16 / static_cast<int>(sizeof(typename S::T));
  if (!vec) return {};  // make_fused_job requires vectors
  return {&fused_tile_kernel<MX, F, S, W>, tile_stages<MX, S>() * tile_bytes<MX, S>()};
}

template <bool MX, Format F>
PickedKernel pick_input(const LaunchGroup& g) {
  using fpg::fp8::Input;
  switch (static_cast<Input>(g.input)) {
    case Input::f32: return pick_vec<MX, F, SrcF32>(g.vec);
    case Input::bf16: return pick_vec<MX, F, SrcBf16>(g.vec);
    case Input::f32_as_bf16: return pick_vec<MX, F, SrcF32AsBf16>(g.vec);
  }
  return {};
}

template <bool MX>
PickedKernel pick_format(const LaunchGroup& g) {
  return g.format == static_cast<uint8_t>(Format::e4m3) ? pick_input<MX, Format::e4m3>(g)
                                                         : pick_input<MX, Format::e5m2>(g);
}

}  // namespace

void launch_fused_tiles(const DeviceJob* jobs, const Task* tasks, const LaunchGroup& g, cudaStream_t stream) {
  const bool mx = g.mode == static_cast<uint8_t>(CastMode::fused_mx_tiles);
  const PickedKernel k = mx ? pick_format<true>(g) : pick_format<false>(g);
  if (!k.fn) throw InternalError("fp8: no fused tile kernel for mode " + std::to_string(g.mode));
  const void* fn = reinterpret_cast<const void*>(k.fn);
  // Above 48 KiB of dynamic shared memory a kernel must opt in; idempotent, so set on every launch.
  FPG_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(k.smem)));
  const int blocks = persistent_blocks(fn, kTileThreads, k.smem);
  const uint32_t grid = g.count < static_cast<uint32_t>(blocks) ? g.count : static_cast<uint32_t>(blocks);
  k.fn<<<grid, kTileThreads, k.smem, stream>>>(jobs, tasks + g.first, g.count);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda::fp8
