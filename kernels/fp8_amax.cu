// The partial-amax pass of the batched copy-back: one launch folds every job's fragment into its
// amax grids (fp8/shard.h step 1, equal to fp8::partial_amax bit for bit).
//
// Main grid (per tensor, blockwise, MX rowwise): each thread reads kU consecutive 16-byte vectors of
// a row, so that a run of one grid cell stays in one thread; the lanes of a warp then merge their
// runs per cell (a segmented reduction over equal cells) and the head of each run keeps it in a
// carry that merges with the same cell in later rounds. A cell is written when the carry moves on:
// a plain max when the carry saw every element of the cell, else atomicMax on the bits.
// MX columnwise: each thread walks one vector of columns down a 32-row band, one amax per column.
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
__device__ void main_task(const DeviceJob& j, uint64_t first, uint32_t n, Acc& carry) {
  const uint64_t K = j.K, ncv = (K + V - 1) / V, r0 = first_row(j);
  const uint32_t per_round = blockDim.x * kU;
  for (uint32_t base = 0; base < n; base += per_round) {  // uniform over the block
    const uint32_t i0 = base + threadIdx.x * kU;
    typename S::T x[kU][V];
    uint32_t mask[kU];
    uint64_t cell[kU];
    uint64_t q = 0, rem = 0;
    if (i0 < n) divmod(first + i0, ncv, q, rem);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      mask[u] = 0;
      cell[u] = 0;
      if (i0 + u < n) {
        const uint64_t r = r0 + q, c = rem * V;
        cell[u] = main_cell(j, r, c);
        mask[u] = load_vec<S, V>(j, r * K + c, x[u]);
        if (++rem == ncv) {
          rem = 0;
          ++q;
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

__global__ void __launch_bounds__(kThreads, kMinBlocks) partial_amax_kernel(const DeviceJob* __restrict__ jobs,
                                                                const Task* __restrict__ tasks, uint32_t n_main,
                                                                uint32_t n) {
  Acc carry;
  for (uint32_t t = blockIdx.x; t < n; t += gridDim.x) {
    const Task task = tasks[t];
    const DeviceJob& j = jobs[task.job];
    if (t < n_main) {
      dispatch_input(j, [&](auto src, auto v) {
        main_task<decltype(src), decltype(v)::value>(j, task.first, task.items, carry);
      });
    } else {
      dispatch_input(j, [&](auto src, auto v) {
        col_task<decltype(src), decltype(v)::value>(j, task.first, task.items);
      });
    }
  }
  // Carries of the same cell in neighbouring lanes (one tensor's amax, say) merge before writing.
  if (merge_runs(carry)) flush(carry);
}

}  // namespace

void launch_partial_amax(const DeviceJob* jobs, const Task* tasks, uint32_t n_main, uint32_t n,
                         cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = persistent_blocks(reinterpret_cast<const void*>(&partial_amax_kernel), kThreads);
  partial_amax_kernel<<<n < static_cast<uint32_t>(blocks) ? n : blocks, kThreads, 0, stream>>>(jobs, tasks,
                                                                                              n_main, n);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda::fp8
