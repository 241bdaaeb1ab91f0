// One-pass quantize of whole 2-D tiles (make_fused_job, fused == kFusedTiles): a CTA copies a tile
// once into shared memory, reduces its amaxes, computes the scales with the CPU's FPG_HD rules
// (blockwise_scale, mx_scale), writes them, and casts. Equal to partial amax + compute_scales + cast
// of the fragment bit for bit.
//
// blockwise 128x128: a tile is one 128-row x 128-column cell; one block max, one scale.
// MX rowwise + columnwise: a tile is a 32-row band x 256 columns; rowwise 1x32 maxima by a
// reduce-scatter among the lanes of a block, columnwise 32x1 maxima from each thread's rows of its
// columns, combined across the row groups through shared memory.
//
// Why a pipeline in shared memory: a tile's scale needs all of it before any byte is cast, so a CTA
// that loads, then reduces, then casts leaves HBM idle while it computes. Here each CTA has NS
// stages that cp.async fills without holding registers, so tiles are on their way while the CTA
// reduces and casts another. TileGeometry says how many CTAs, warps and stages an SM holds.
//
// Each thread copies, and later reads, the same words of every stage (vector i of thread t is word
// i * threads + t of the stage, wherever it lies in the tile), so a stage needs no barrier to be
// read or refilled: a thread waits for its own copy group, reads its vectors, and refills its
// words with a later tile once it is done with them. The one barrier per tile is the
// exchange of maxima between warps. Every thread works out the scales it needs itself (no
// serial section while the others wait). BENCHMARKS.md has the measured ratios to a D2D copy and
// the variants tried before this one.
//
// Tile geometry: vector (16 bytes, V elements) i of a thread is row `row + i * RS`, columns `col`
// on (walk_of says where each thread starts). One tile per task (DeviceBatch makes them so).
// Fragments hold whole tiles' rows (start and end on band boundaries, or the end of the tensor);
// the column edge (K not a multiple of the tile) and the last band's rows past M are zero-filled
// (key 0, neutral for the max) and not written. Vectors only (make_fused_job requires them).
#include <string>
#include <type_traits>

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

// A CTA's shape: `threads` per CTA, `blocks` CTAs per SM, `smem` bytes of shared memory each (the
// stages and the exchange of maxima), tiles of `rows` x `cols`.
template <int Threads, int Blocks, size_t Smem, int Rows, int Cols>
struct Geometry {
  static constexpr int threads = Threads, warps = Threads / 32, blocks = Blocks, rows = Rows, cols = Cols;
  static constexpr size_t smem = Smem;
};
// 128x128: one CTA of 16 warps per SM, 3 fp32 stages (6 bf16); a thread keeps its vectors in
// registers from the maxima to the cast.
using Blockwise128Geometry = Geometry<512, 1, 200 * 1024, 128, 128>;
// MX: three CTAs of 8 warps per SM, 2 fp32 stages (3 bf16) of 32 x 256 each. The kernel is
// latency-bound: 24 warps in three CTAs, each meeting only at its own barrier, hide more than one
// CTA of 16 warps (0.895 of a copy against 0.85; BENCHMARKS.md has the geometries measured, and
// 0.92 with the tasks read ahead).
// 24 warps leave 80 registers a thread, so it reads its vectors from the stage twice, for the
// maxima and for the casts, and refills its words only after the casts.
using MxGeometry = Geometry<256, 3, 72 * 1024, 32, 256>;
template <bool MX>
using TileGeometry = std::conditional_t<MX, MxGeometry, Blockwise128Geometry>;
static_assert(MxGeometry::cols == fused_tile_cols(true) && Blockwise128Geometry::cols == fused_tile_cols(false),
              "DeviceBatch makes tasks of fused_tile_cols columns");

template <bool MX, class S>
constexpr size_t tile_bytes() {
  return static_cast<size_t>(TileGeometry<MX>::rows) * TileGeometry<MX>::cols * sizeof(typename S::T);
}
// The maxima exchanged once per tile, double-buffered: the warps' block maxima (128x128), or the
// column maxima of each row group (MX: threads / (cols / V) groups x cols).
template <bool MX, class S>
constexpr int exchange_words() {
  using G = TileGeometry<MX>;
  constexpr int V = 16 / static_cast<int>(sizeof(typename S::T)), row_groups = G::threads / (G::cols / V);
  return MX ? row_groups * G::cols : G::warps;
}
template <bool MX, class S>
constexpr int tile_stages() {
  constexpr size_t exchange = 2 * exchange_words<MX, S>() * sizeof(uint32_t);
  return static_cast<int>((TileGeometry<MX>::smem - exchange) / tile_bytes<MX, S>());
}

// The rows of a job's fragment, worked out once per job a CTA meets (its tasks mostly share one),
// not per tile.
struct JobRows {
  uint32_t job = 0xFFFFFFFFu;
  uint64_t first = 0, end = 0;  // first row, end row
};

__device__ __forceinline__ const JobRows& rows_of(JobRows& c, uint32_t job, const DeviceJob& j) {
  if (c.job != job) {
    uint64_t q, r;
    divmod(j.start + j.count, j.K, q, r);
    c = JobRows{job, first_row(j), q + (r ? 1 : 0)};
  }
  return c;
}

// This thread's part of one tile: its vectors i = 0 .. PER-1 are vector i * TH + tid of the tile
// (TH threads per CTA), all in one column run (TH is a multiple of the vectors per row), rows
// row + i * RS; vectors 0 .. present-1 are inside the tensor. Per vector: one add.
struct TileWalk {
  uint64_t r0, c0;  // the tile's first tensor row and column
  uint64_t row;     // this thread's first tensor row; its rows step by RS
  uint64_t col;     // this thread's first tensor column
  uint64_t off;     // its first vector's element, from the fragment's first element
  uint64_t step;    // RS * K: the flat step from one of its vectors to the next
  int present;
};

// Thread t has row group t / VPR and column vector t % VPR: a warp reads and writes 512 contiguous
// bytes of one row. (The alternative for MX, a warp holding a 32-column block of
// all 32 rows so that the column maxima need no barrier, measured 0.81 of a copy against 0.84, with its
// stage words swizzled; unswizzled, the cp.async fills of its 4-row loads conflicted on the banks
// and it ran at 0.48.)
template <int TH, int BR, int W, int V, int PER>
__device__ __forceinline__ TileWalk walk_of(const DeviceJob& j, const JobRows& c, const Task& task) {
  constexpr int VPR = W / V, RS = TH / VPR;
  TileWalk w;  // the task is band `first`, tile column `items` (DeviceBatch's add_tile_tasks)
  w.r0 = c.first + task.first * BR;
  w.c0 = static_cast<uint64_t>(task.items) * W;
  w.row = w.r0 + threadIdx.x / VPR;
  w.col = w.c0 + (threadIdx.x % VPR) * V;
  const uint64_t rows = w.col < j.K && w.row < c.end ? (c.end - w.row + RS - 1) / RS : 0;
  w.present = rows < PER ? static_cast<int>(rows) : PER;
  w.off = w.row * j.K + w.col - j.start;
  w.step = static_cast<uint64_t>(RS) * j.K;
  return w;
}

// Max over the G consecutive lanes of a group (G a power of two) of each of G values, scattered:
// afterwards lane p of the group (lane % G == p) returns the max of value p. Each level halves the
// values a lane keeps, exchanging the other half with the lane across it: G - 1 shuffles in all,
// not G log G.
template <int G>
__device__ __forceinline__ uint32_t reduce_scatter_max(uint32_t (&m)[G], int lane) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) {
    const bool upper = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < o; ++i) {
      const uint32_t send = upper ? m[i] : m[i + o];
      const uint32_t keep = upper ? m[i + o] : m[i];
      m[i] = max(keep, __shfl_xor_sync(kFull, send, o));
    }
  }
  return m[0];
}

// fn(i) for this thread's present vectors i (0 .. present-1); whole tiles (all PER present, the
// common case) without per-vector checks.
template <int PER, class Fn>
__device__ __forceinline__ void for_present(int present, Fn&& fn) {
  if (present == PER) {
#pragma unroll
    for (int i = 0; i < PER; ++i) fn(i);
  } else {
#pragma unroll
    for (int i = 0; i < PER; ++i)
      if (i < present) fn(i);
  }
}

template <int V>
__device__ __forceinline__ void fill(float (&s)[V], float v) {
#pragma unroll
  for (int q = 0; q < V; ++q) s[q] = v;
}

template <bool MX, Format F, class S, int V>
__global__ void __launch_bounds__(TileGeometry<MX>::threads, TileGeometry<MX>::blocks)
    fused_tile_kernel(const DeviceJob* __restrict__ jobs, const Task* __restrict__ tasks, uint32_t n, bool strided) {
  using T = typename S::T;
  using Geo = TileGeometry<MX>;
  constexpr int kTileThreads = Geo::threads, kTileWarps = Geo::warps;
  constexpr int BR = Geo::rows, W = Geo::cols, NS = tile_stages<MX, S>();
  constexpr int VPR = W / V, NV = BR * VPR, PER = NV / kTileThreads, RS = kTileThreads / VPR;
  static_assert(kTileThreads % VPR == 0 && NV % kTileThreads == 0, "a thread's vectors share columns");
  extern __shared__ uint4 stage_words[];  // NS tiles of NV vectors, BR x W values each
  // The maxima exchanged once per tile, double-buffered (tile k uses buffer k & 1) so that a fast
  // thread writing tile k+1's cannot overwrite tile k's before a slow one has read them: the warps'
  // block maxima (128x128), or the column maxima of each row group (MX: RS groups x W columns).
  __shared__ __align__(16) uint32_t red[2][exchange_words<MX, S>()];
  static_assert(!MX || exchange_words<MX, S>() == RS * W, "MX exchanges RS x W column maxima");
  const int lane = threadIdx.x & 31;

  // This CTA's k-th tile is task first + k * step. Strided (step gridDim.x) when the jobs are large
  // (at least one tile per CTA each, on average): the CTAs then work on neighbouring tiles, whole
  // runs of rows at a time. Otherwise (a batch of small tensors) a contiguous run of the list, so
  // that consecutive tiles of a CTA mostly share a job: its rows are worked out once and its
  // descriptor stays in cache, where a strided walk would change job at every tile.
  const uint64_t first = strided ? blockIdx.x : uint64_t{n} * blockIdx.x / gridDim.x;
  const uint64_t step = strided ? gridDim.x : 1;
  const uint64_t end = strided ? n : uint64_t{n} * (blockIdx.x + 1) / gridDim.x;

  // Starts copying this CTA's k-th tile (one tile per task) into this thread's words of stage
  // k % NS; those outside the tensor are zero-filled (key 0: neutral for the max). A commit group
  // even when there is no tile, so that group k is always tile k.
  JobRows issued, current;  // the job of the last tile issued / computed
  auto task_at = [&](uint32_t k) {
    const uint64_t t = first + k * step;
    return t < end ? tasks[t] : Task{};
  };
  auto issue = [&](uint32_t k, const Task& task) {
    if (first + k * step < end) {
      const DeviceJob& j = jobs[task.job];
      const TileWalk w = walk_of<kTileThreads, BR, W, V, PER>(j, rows_of(issued, task.job, j), task);
      const T* src = static_cast<const T*>(j.in) + w.off;
      uint4* dst = stage_words + static_cast<size_t>(k % NS) * NV + threadIdx.x;
      if (w.present == PER) {  // a whole tile: no per-vector checks
#pragma unroll
        for (int i = 0; i < PER; ++i) copy_async_16(dst + i * kTileThreads, src + i * w.step);
      } else {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
          if (i < w.present) copy_async_16(dst + i * kTileThreads, src + i * w.step);
          else dst[i * kTileThreads] = make_uint4(0, 0, 0, 0);
        }
      }
    }
    copy_async_commit();
  };

  // The tasks of the NS tiles in flight, kept in registers, and each task read a whole tile before
  // the tile is issued: a task read where it is used had every warp wait on an L2 round trip twice
  // per tile, behind the tile copies in flight (ncu: a fifth of the stall samples).
#pragma unroll 1
  for (int k = 0; k < NS; ++k) issue(k, task_at(k));
  Task ahead[NS];  // ahead[i]: the task of tile k + i (the first NS read twice, once per CTA, so
                   // that issue stays one copy of code in a loop not unrolled)
#pragma unroll
  for (int i = 0; i < NS; ++i) ahead[i] = task_at(i);
#pragma unroll 1
  for (uint32_t k = 0; first + k * step < end; ++k) {
    const Task next = task_at(k + NS);  // issued at the end of this tile
    const Task task = ahead[0];
    const DeviceJob& j = jobs[task.job];
    const TileWalk w = walk_of<kTileThreads, BR, W, V, PER>(j, rows_of(current, task.job, j), task);

    copy_async_wait<NS - 1>();  // this thread's words of tile k have landed
    const uint4* stage = stage_words + static_cast<size_t>(k % NS) * NV;
    T x[PER][V];  // this thread's vectors: vector i is i * kTileThreads + tid of the stage
#pragma unroll
    for (int i = 0; i < PER; ++i) unpack16<S, V>(stage[i * kTileThreads + threadIdx.x], x[i]);

    uint32_t* const maxima = red[k & 1];
    if constexpr (!MX) {
      float m = 0.0f;
#pragma unroll
      for (int i = 0; i < PER; ++i) m = vec_abs_max<S, V>(m, x[i]);
      const uint32_t wm = warp_max(float_bits(m));
      if (lane == 0) maxima[threadIdx.x >> 5] = wm;
      issue(k + NS, next);  // the max has consumed this thread's words of the stage
      __syncthreads();
      uint32_t key = 0;
#pragma unroll
      for (int q = 0; q < kTileWarps / 4; ++q) {
        const uint4 v = reinterpret_cast<const uint4*>(maxima)[q];
        key = max(key, max(max(v.x, v.y), max(v.z, v.w)));
      }
      const float s = fpg::fp8::blockwise_scale(bits_float(key), F, j.pow2, j.epsilon, static_cast<Input>(j.input));
      if (threadIdx.x == 0) {
        const uint64_t cell = (w.r0 >> 7) * j.grid_cols + (w.c0 >> 7);
        if (j.scale_out) j.scale_out[cell] = s;
        if (j.scale_inv_out) j.scale_inv_out[cell] = fpg::fp8::scale_inv_of(s);
        if (j.amax) fold_cell(j.amax + cell, key, true);  // the CTA saw the whole cell
      }
      if (j.out) {
        float sv[V];
        fill(sv, s);
        uint8_t* o = j.out + w.off;
        for_present<PER>(w.present, [&](int i) { store_encoded<F, S, V>(o + i * w.step, x[i], sv); });
      }
    } else {
      constexpr int G = 32 / V;  // lanes per 1x32 block
      static_assert(PER == G, "each lane of a block works out one of its PER scales");
      // Columnwise: this thread's max of each of its V columns over its PER rows, for the others
      // of its columns (one per row group) to combine after the barrier. (MX tile jobs always have
      // columnwise scales: fp8_batch.cpp's fused_kind gives rowwise-only MX the row kernel. Not testing
      // j.has_col here, before the barrier, freed 7 registers.)
      {
        float cm[V];
        fill(cm, 0.0f);
#pragma unroll
        for (int i = 0; i < PER; ++i)
#pragma unroll
          for (int q = 0; q < V; ++q) cm[q] = fmaxf(cm[q], fabsf(S::load(x[i][q])));
        uint4* dst = reinterpret_cast<uint4*>(maxima + (threadIdx.x / VPR) * W + (threadIdx.x % VPR) * V);
#pragma unroll
        for (int h = 0; h < V / 4; ++h)
          dst[h] = make_uint4(float_bits(cm[4 * h]), float_bits(cm[4 * h + 1]), float_bits(cm[4 * h + 2]),
                              float_bits(cm[4 * h + 3]));
      }
      // Rowwise: the max of each 1x32 block (the G lanes' vector i, for each i; absent vectors: 0),
      // reduce-scattered over the block's lanes: lane p of the block ends with block p's max.
      uint32_t m[PER];
#pragma unroll
      for (int i = 0; i < PER; ++i) m[i] = float_bits(vec_abs_max<S, V>(0.0f, x[i]));
      const uint32_t key = reduce_scatter_max<G>(m, lane);
      __syncthreads();

      // The row scales: each lane works out one, that of its block's vector `own`.
      float s = 1.0f;
      if (j.has_row) {
        const int own = lane % G;
        if (own < w.present) {  // a 1x32 block is wholly present or absent
          const uint8_t e = fpg::fp8::mx_scale(bits_float(key), F, static_cast<fpg::fp8::MxRule>(j.mx_rule));
          s = fpg::fp8::mx_exp2f_rcp(e);
          const uint64_t cell = (w.row + static_cast<uint64_t>(own) * RS) * j.grid_cols + (w.col >> 5);
          if (j.e8m0_out) j.e8m0_out[cell] = e;
          if (j.amax) fold_cell(j.amax + cell, key, true);
        }
      }
      // The column scales: the max of each of this thread's columns over all RS row groups, its
      // scale, and (row group 0) the scales and amaxes written.
      float sc[V];
      if (j.has_col) {
        const int tc = static_cast<int>(threadIdx.x % VPR) * V;  // the thread's columns in the tile
        uint32_t ck[V];
#pragma unroll
        for (int q = 0; q < V; ++q) ck[q] = 0;
#pragma unroll
        for (int g = 0; g < RS; ++g)
#pragma unroll
          for (int h = 0; h < V / 4; ++h) {
            const uint4 v = reinterpret_cast<const uint4*>(maxima + g * W + tc)[h];
            ck[4 * h] = max(ck[4 * h], v.x);
            ck[4 * h + 1] = max(ck[4 * h + 1], v.y);
            ck[4 * h + 2] = max(ck[4 * h + 2], v.z);
            ck[4 * h + 3] = max(ck[4 * h + 3], v.w);
          }
        const bool writer = threadIdx.x < VPR;  // row group 0 writes the column scales
#pragma unroll
        for (int q = 0; q < V; ++q) {
          const uint8_t e = fpg::fp8::mx_scale(bits_float(ck[q]), F, static_cast<fpg::fp8::MxRule>(j.mx_rule));
          sc[q] = fpg::fp8::mx_exp2f_rcp(e);
          if (writer && w.col + q < j.K) {
            const uint64_t cell = (w.r0 >> 5) * j.K + w.col + q;
            if (j.e8m0_col_out) j.e8m0_col_out[cell] = e;
            if (j.amax_col) fold_cell(j.amax_col + cell, ck[q], true);
          }
        }
      }
      // Both casts of each vector, read from the stage again. Vector i's row scale is that of lane
      // i of its block, shuffled to every lane (outside the per-vector check, which differs
      // between lanes at the column edge).
      uint8_t* const orow = j.has_row ? j.out : nullptr;
      uint8_t* const ocol = j.has_col ? j.out_col : nullptr;
      auto cast = [&](int i, bool present) {
        float sv[V];
        fill(sv, __shfl_sync(kFull, s, (lane & ~(G - 1)) + i));
        if (!present) return;
        unpack16<S, V>(stage[i * kTileThreads + threadIdx.x], x[i]);
        if (orow) store_encoded<F, S, V>(orow + w.off + i * w.step, x[i], sv);
        if (ocol) store_encoded<F, S, V>(ocol + w.off + i * w.step, x[i], sc);
      };
      if (orow || ocol) {
        if (w.present == PER) {  // a whole tile: no per-vector checks
#pragma unroll
          for (int i = 0; i < PER; ++i) cast(i, true);
        } else {
#pragma unroll
          for (int i = 0; i < PER; ++i) cast(i, i < w.present);
        }
      }
      issue(k + NS, next);  // the casts have consumed this thread's words of the stage
    }
#pragma unroll
    for (int i = 0; i + 1 < NS; ++i) ahead[i] = ahead[i + 1];
    ahead[NS - 1] = next;
  }
  copy_async_wait<0>();  // no copy outlives the CTA (the trailing groups are empty)
}

using TileKernel = void (*)(const DeviceJob*, const Task*, uint32_t, bool);

struct PickedKernel {
  TileKernel fn = nullptr;
  size_t smem = 0;
  int threads = 0;
};

template <bool MX, Format F, class S>
PickedKernel pick_vec(bool vec) {
  constexpr int W = 16 / static_cast<int>(sizeof(typename S::T));
  if (!vec) return {};  // make_fused_job requires vectors
  return {&fused_tile_kernel<MX, F, S, W>, tile_stages<MX, S>() * tile_bytes<MX, S>(), TileGeometry<MX>::threads};
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
  const int blocks = persistent_blocks(fn, k.threads, k.smem);
  const uint32_t grid = g.count < static_cast<uint32_t>(blocks) ? g.count : static_cast<uint32_t>(blocks);
  // Strided when the jobs have at least one tile per CTA on average (the kernel says why).
  const bool strided = g.count >= static_cast<uint64_t>(grid) * (g.jobs ? g.jobs : 1);
  k.fn<<<grid, k.threads, k.smem, stream>>>(jobs, tasks + g.first, g.count, strided);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda::fp8
