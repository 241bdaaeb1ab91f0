// The batched copy-back on the GPU: every owned fragment of every parameter quantized by one kernel
// launch per kind of job (one in all when every parameter has the same recipe, input and alignment)
// that reads a descriptor table in device memory (DeviceJob, kernels/fp8_job.h), and likewise for
// the partial amaxes of all fragments; one launch for the scales of all tensors.
//
// The table is uploaded once (construction) and reused every step; the kernels walk it as a list of
// tasks (a run of vector accesses of one job), one CTA at a time, grid-stride, so fragments of any
// size and mix share one persistent grid. Results equal fp8::batch_partial_amax / batch_cast and the
// per-fragment calls bit for bit, for any split (tests/gpu/fp8_batch_test.cpp).
//
// Amax folding: a grid cell that one thread saw entirely is written with a plain max; a cell shared
// with other threads or fragments is folded by atomicMax on the float's bit pattern, which orders
// like the value for the non-negative, NaN-free amaxes (NaN never enters a grid, as on the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fp8/batch.h"
#include "fp8/recipe.h"
#include "kernels/fp8_job.h"
#include "kernels/stream.h"

namespace fpg::cuda::fp8 {

// A run of work items of one job. What an item is depends on the pass (see fp8_kernels.cuh). A
// tile task (fp8_fused_tiles.cu) is one tile: `first` is its band of rows in the fragment, `items`
// its tile column.
struct Task {
  uint32_t job = 0;
  uint32_t items = 0;
  uint64_t first = 0;
};

// A run of the task list that one kernel instantiation covers: the kernels are specialised per pass
// mode, input type, vector width and format (kernels/fp8_launch.h picks the mode of a job), so each
// one is small enough to keep many loads in flight; a batch launches one kernel per distinct group.
struct LaunchGroup {
  uint8_t mode = 0, input = 0, vec = 0, format = 0;
  uint32_t first = 0, count = 0;  // tasks [first, first + count)
  uint32_t jobs = 0;              // distinct jobs among them (their tasks are consecutive)
};

class DeviceBatch {
 public:
  DeviceBatch() = default;
  // Uploads the table (synchronously: the host vectors may go away after this returns).
  explicit DeviceBatch(const std::vector<DeviceJob>& jobs);
  ~DeviceBatch();
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;
  DeviceBatch(DeviceBatch&& o) noexcept;
  DeviceBatch& operator=(DeviceBatch&& o) noexcept;

  // One launch per group (usually one in all): every job's partial amax folds into its grids (zero
  // them before, or hold partial amaxes to combine with). Jobs may share grids.
  void partial_amax(cudaStream_t stream) const;
  // One launch per group: every job's fragment cast with its scales. Outputs of different jobs must not
  // overlap. Delayed jobs with an amax grid also fold their amax in the same pass (the delayed
  // recipe casts with the previous scale and records this step's amax, as TE DelayedScaling). Fused
  // jobs (make_fused_job) take their amax, write their scales and cast, all in this launch.
  void cast(cudaStream_t stream) const;

  size_t size() const { return n_jobs_; }

 private:
  void release();
  size_t n_jobs_ = 0;
  DeviceJob* jobs_ = nullptr;  // device
  Task* amax_tasks_ = nullptr;  // device, ordered by group
  Task* cast_tasks_ = nullptr;
  std::vector<LaunchGroup> amax_groups_, cast_groups_;
};

// One tensor's grids for the batched scale computation.
struct ScaleJob {
  uint64_t cells = 0, col_cells = 0;  // plan.grid.size(), plan.col_grid.size()
  uint8_t scaling = 0, format = 0, input = 0, mx_rule = 0, pow2 = 0;
  float epsilon = 0;
  const float* amax = nullptr;
  const float* amax_col = nullptr;
  float* scale = nullptr;
  float* scale_inv = nullptr;
  uint8_t* e8m0 = nullptr;
  uint8_t* e8m0_col = nullptr;
};

// Throws UsageError for delayed plans, as fp8::compute_scales does.
ScaleJob make_scale_job(const fpg::fp8::Plan& p, const float* amax, const float* amax_col, float* scale,
                        float* scale_inv, uint8_t* e8m0, uint8_t* e8m0_col);

// compute_scales for many tensors in one launch; table uploaded once.
class ScaleBatch {
 public:
  ScaleBatch() = default;
  explicit ScaleBatch(const std::vector<ScaleJob>& jobs);
  ~ScaleBatch();
  ScaleBatch(const ScaleBatch&) = delete;
  ScaleBatch& operator=(const ScaleBatch&) = delete;
  void run(cudaStream_t stream) const;

 private:
  ScaleJob* jobs_ = nullptr;
  Task* tasks_ = nullptr;
  uint32_t n_tasks_ = 0;
};

// The CPU batch API with device pointers in the jobs: builds a DeviceBatch, runs its launches,
// and frees it (stream-ordered). For repeated use keep a DeviceBatch.
void batch_partial_amax(const fpg::fp8::FragmentJob* jobs, size_t n, cudaStream_t stream);
void batch_cast(const fpg::fp8::FragmentJob* jobs, size_t n, cudaStream_t stream);

}  // namespace fpg::cuda::fp8
