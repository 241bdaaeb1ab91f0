// Many fragments of many tensors in one threaded pass: the descriptor table the copy-back of the
// distributed optimizer (and `fpgather convert`, slab by slab) hands over. Each job is one fragment
// of one tensor; jobs of the same tensor share its grids. Large fragments are split into pieces that
// run on different threads; the result is the same as running the jobs one by one, for any pool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"
#include "fp8/recipe.h"
#include "fp8/shard.h"

namespace fpg {
namespace fp8 {

struct FragmentJob {
  const Plan* plan = nullptr;
  uint64_t start = 0, count = 0;  // the fragment [start, start+count) of the tensor
  const void* in = nullptr;       // its values (element `start` first), in plan->input's type
  float* amax = nullptr;          // the tensor's full amax grids (partial amax folds in)
  float* amax_col = nullptr;
  ScaleView scales;               // the tensor's full scale grids (cast)
  uint8_t* out = nullptr;         // the fragment's output slices, count bytes each (cast)
  uint8_t* out_col = nullptr;
};

// Folds every job's partial amax into its grids. Grids must be zeroed (or hold partial amaxes to
// combine with) before; pieces fold through private windows merged under a lock, so jobs may share
// grids.
void batch_partial_amax(const FragmentJob* jobs, size_t n, ThreadPool& pool);

// Casts every job's fragment with its scales. Outputs of different jobs must not overlap.
void batch_cast(const FragmentJob* jobs, size_t n, ThreadPool& pool);

}  // namespace fp8
}  // namespace fpg
