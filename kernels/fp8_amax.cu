// The partial-amax pass of the batched copy-back: folds every job's fragment into its amax grids
// (fp8/shard.h step 1, equal to fp8::partial_amax bit for bit). One kernel per mode (fp8_launch.h),
// input type and vector width:
//
// tensor: each thread keeps a max over 8 (bf16: 4) block-strided 16-byte loads per round; one block
// max and one atomicMax per job and CTA.
// rows, rows_mx (1x128 / MX rowwise, K % block == 0): block-strided loads as in the cast, so a block lies in
// the G = block / V lanes of one warp access; they reduce it by shuffles and the first of them writes
// the cell (a plain max when the block is wholly inside the fragment, else atomicMax).
// tiles (128x128, K % 128 == 0): as rows, the 128-element piece folded into its cell by atomicMax.
// generic (other 128x128 and 1x128 shapes): each thread reads kU consecutive 16-byte vectors, so that a
// run of one grid cell stays in one thread; the lanes of a warp then merge their runs per cell (a
// segmented reduction over equal cells) and the head of each run keeps it in a carry that merges
// with the same cell in later rounds. A cell is written when the carry moves on: a plain max when
// the carry saw every element of the cell, else atomicMax on the bits.
// col (MX columnwise): each thread walks one vector of columns down a 32-row band, one amax per column.
#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_launch.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;

constexpr int kU = 4;  // consecutive vectors per thread per round

// A partial amax of one grid cell: its key (the cell's address), the max key of the values seen,
// how many elements were seen and how many the cell has.
struct Acc {
  uint64_t cell = 0;
  uint32_t v = 0;
  uint64_t seen = 0, size = 0;
};

__device__ __forceinline__ void flush(const Acc& a) {
  if (a.cell) fold_cell(reinterpret_cast<float*>(a.cell), a.v, a.seen == a.size);
}

__device__ __forceinline__ void push(Acc& carry, const Acc& a) {
  if (!a.cell) return;
  if (carry.cell == a.cell) {
    carry.v = a.v > carry.v ? a.v : carry.v;
    carry.seen += a.seen;
    return;
  }
  flush(carry);
  carry = a;
}

// Merges the lanes' accumulators over each run of consecutive lanes with the same cell; the first
// lane of a run ends with the run's total and gets true. All 32 lanes must call it.
__device__ __forceinline__ bool merge_runs(Acc& a) {
  const int lane = threadIdx.x & 31;
  const uint64_t prev = __shfl_up_sync(kFull, a.cell, 1);
  const unsigned heads = __ballot_sync(kFull, lane == 0 || prev != a.cell);
  const unsigned later = heads & ~((2u << lane) - 1u);
  const int next_head = later ? __ffs(later) - 1 : 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t v = __shfl_down_sync(kFull, a.v, o);
    const uint64_t seen = __shfl_down_sync(kFull, a.seen, o);
    if (lane + o < next_head) {
      a.v = v > a.v ? v : a.v;
      a.seen += seen;
    }
  }
  return (heads >> lane) & 1u;
}

template <class S, int V>
__device__ void tensor_task(const DeviceJob& j, uint64_t first, uint32_t n, uint32_t& a) {
  using T = typename S::T;
  stream_items<S, V, loads_in_flight<S, V>()>(j, first_row(j) * j.K + first * V, n,
                                               [&](const T(&x)[V], uint64_t, uint32_t, bool) {
                                                 const uint32_t m = vec_key_max<S, V>(x);  // 0 outside
                                                 a = m > a ? m : a;
                                               });
}

// Rows (Tiles false): cells are row blocks of B elements; tiles: a 128-element piece of a row of a
// 128x128 cell, folded by atomicMax (a cell spans 128 rows).
template <class S, int V, bool MX, bool Tiles = false>
__device__ void rows_task(const DeviceJob& j, uint64_t first, uint32_t n) {
  using T = typename S::T;
  constexpr int shift = MX ? 5 : 7, B = 1 << shift, G = B / V;  // G <= 32 (amax_mode)
  const uint64_t s = j.start, e = j.start + j.count;
  const int lane = threadIdx.x & 31;
  stream_items<S, V, loads_in_flight<S, V>()>(
      j, first_row(j) * j.K + first * V, n, [&](const T(&x)[V], uint64_t g, uint32_t, bool in_task) {
        const uint32_t m = group_max<G>(vec_key_max<S, V>(x));  // elements outside the fragment: 0
        // At the head lane g is the block's start; a block is wholly inside the task's items or
        // wholly past them (n is a multiple of G), and may straddle the fragment's ends.
        if (lane % G == 0 && in_task && g + B > s && g < e) {
          if constexpr (Tiles) {
            uint64_t r, c;
            divmod(g, j.K, r, c);
            fold_cell(j.amax + (r >> 7) * j.grid_cols + (c >> 7), m, false);
          } else {
            fold_cell(j.amax + (g >> shift), m, g >= s && g + B <= e);
          }
        }
      });
}

template <class S, int V>
__device__ void main_task(const DeviceJob& j, uint64_t first, uint32_t n, Acc& carry) {
  const uint64_t gbase = first_row(j) * j.K + first * V;  // item i starts at gbase + i * V
  const uint32_t per_round = blockDim.x * kU;
  for (uint32_t base = 0; base < n; base += per_round) {  // uniform over the block
    const uint32_t i0 = base + threadIdx.x * kU;
    typename S::T x[kU][V];
    uint32_t mask[kU];
    uint64_t cell[kU];
    // The cell of the first vector by one division; the next ones step along the row.
    uint64_t r = 0, c = 0;
    if (i0 < n) divmod(gbase + uint64_t{i0} * V, j.K, r, c);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      mask[u] = 0;
      cell[u] = 0;
      if (i0 + u < n) {
        cell[u] = main_cell(j, r, c);
        mask[u] = load_vec<S, V>(j, r * j.K + c, x[u]);
        c += V;
        if (c >= j.K) {
          c = 0;
          ++r;
        }
      }
    }
    Acc a;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (!mask[u]) continue;
      uint32_t m = 0;
#pragma unroll
      for (int k = 0; k < V; ++k) {  // elements outside the fragment hold 0
        const uint32_t key = key_of<S>(x[u][k]);
        m = key > m ? key : m;
      }
      const uint64_t addr = reinterpret_cast<uint64_t>(j.amax + cell[u]);
      const uint64_t seen = __popc(mask[u]);
      if (addr == a.cell) {
        a.v = m > a.v ? m : a.v;
        a.seen += seen;
      } else {
        push(carry, a);
        a = Acc{addr, m, seen, main_cell_size(j, cell[u])};
      }
    }
    if (merge_runs(a)) push(carry, a);
  }
}

template <class S, int V>
__device__ void col_task(const DeviceJob& j, uint64_t first, uint32_t n) {
  const uint64_t K = j.K, ncv = (K + V - 1) / V;
  const uint64_t r_first = first_row(j), r_end = (j.start + j.count - 1) / K + 1;
  const uint64_t b0 = r_first / 32;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    uint64_t q, rem;
    divmod(first + i, ncv, q, rem);
    const uint64_t band = b0 + q, c = rem * V;
    const uint64_t rb = band * 32 > r_first ? band * 32 : r_first;
    const uint64_t re = band * 32 + 32 < r_end ? band * 32 + 32 : r_end;
    uint32_t m[V], seen[V];
#pragma unroll
    for (int k = 0; k < V; ++k) m[k] = seen[k] = 0;
    for (uint64_t r = rb; r < re; r += 4) {
      typename S::T x[4][V];
      uint32_t mask[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        mask[t] = 0;
        if (r + t < re) {
          mask[t] = load_vec<S, V>(j, (r + t) * K + c, x[t]);
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) x[t][k] = typename S::T(0);
        }
      }
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const uint32_t key = key_of<S>(x[t][k]);
          m[k] = key > m[k] ? key : m[k];
          seen[k] += (mask[t] >> k) & 1u;
        }
    }
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (seen[k]) fold_cell(j.amax_col + band * K + c + k, m[k], seen[k] == 32);
  }
}

template <int Mode, class S, int V>
__global__ void __launch_bounds__(kThreads, Mode == static_cast<int>(AmaxMode::generic) ||
                                                    Mode == static_cast<int>(AmaxMode::col)
                                                ? kMinBlocks
                                                : kMinBlocksFast)
    partial_amax_kernel(const DeviceJob* __restrict__ jobs, const Task* __restrict__ tasks, uint32_t n) {
  constexpr auto M = static_cast<AmaxMode>(Mode);
  [[maybe_unused]] Acc carry;
  [[maybe_unused]] uint32_t a = 0;
  __shared__ uint32_t red[kThreads / 32];
  for (uint32_t t = blockIdx.x; t < n; t += gridDim.x) {
    const Task task = tasks[t];
    const DeviceJob& j = jobs[task.job];
    if constexpr (M == AmaxMode::tensor) {
      tensor_task<S, V>(j, task.first, task.items, a);
      fold_tensor_amax(a, j.amax, tasks, t, n, red);
    } else if constexpr (M == AmaxMode::rows || M == AmaxMode::rows_mx || M == AmaxMode::tiles) {
      rows_task<S, V, M == AmaxMode::rows_mx, M == AmaxMode::tiles>(j, task.first, task.items);
    } else if constexpr (M == AmaxMode::generic) {
      main_task<S, V>(j, task.first, task.items, carry);
    } else {
      col_task<S, V>(j, task.first, task.items);
    }
  }
  if constexpr (M == AmaxMode::generic) {
    // Carries of the same cell in neighbouring lanes (one tensor's amax, say) merge before writing.
    if (merge_runs(carry)) flush(carry);
  }
}

using AmaxFn = void (*)(const DeviceJob*, const Task*, uint32_t);

template <int Mode, class S>
AmaxFn pick_vec(bool vec) {
  constexpr int W = 16 / static_cast<int>(sizeof(typename S::T));
  constexpr auto M = static_cast<AmaxMode>(Mode);
  // A 1x128 block of single elements does not fit a warp access: amax_mode never picks it.
  if constexpr (M == AmaxMode::rows || M == AmaxMode::tiles) return vec ? &partial_amax_kernel<Mode, S, W> : nullptr;
  else return vec ? &partial_amax_kernel<Mode, S, W> : &partial_amax_kernel<Mode, S, 1>;
}

template <int Mode>
AmaxFn pick_input(const LaunchGroup& g) {
  using fpg::fp8::Input;
  switch (static_cast<Input>(g.input)) {
    case Input::f32: return pick_vec<Mode, SrcF32>(g.vec);
    case Input::bf16: return pick_vec<Mode, SrcBf16>(g.vec);
    case Input::f32_as_bf16: return pick_vec<Mode, SrcF32AsBf16>(g.vec);
  }
  return nullptr;
}

AmaxFn amax_kernel_for(const LaunchGroup& g) {
  switch (static_cast<AmaxMode>(g.mode)) {
    case AmaxMode::tensor: return pick_input<static_cast<int>(AmaxMode::tensor)>(g);
    case AmaxMode::rows: return pick_input<static_cast<int>(AmaxMode::rows)>(g);
    case AmaxMode::rows_mx: return pick_input<static_cast<int>(AmaxMode::rows_mx)>(g);
    case AmaxMode::tiles: return pick_input<static_cast<int>(AmaxMode::tiles)>(g);
    case AmaxMode::generic: return pick_input<static_cast<int>(AmaxMode::generic)>(g);
    case AmaxMode::col: return pick_input<static_cast<int>(AmaxMode::col)>(g);
  }
  return nullptr;
}

}  // namespace

void launch_partial_amax(const DeviceJob* jobs, const Task* tasks, const std::vector<LaunchGroup>& groups,
                         cudaStream_t stream) {
  for (const LaunchGroup& g : groups) {
    if (g.count == 0) continue;
    const AmaxFn k = amax_kernel_for(g);
    if (!k) throw InternalError("fp8: no amax kernel for mode " + std::to_string(g.mode));
    const int blocks = persistent_blocks(reinterpret_cast<const void*>(k), kThreads);
    const uint32_t grid = g.count < static_cast<uint32_t>(blocks) ? g.count : static_cast<uint32_t>(blocks);
    k<<<grid, kThreads, 0, stream>>>(jobs, tasks + g.first, g.count);
    FPG_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace fpg::cuda::fp8
