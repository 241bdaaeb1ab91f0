// Saving one rank's optimizer state in either state layout (lib/ARCHITECTURE.md), the way the
// pipeline will call it: the rank writes exactly the fragments it owns and declares the alignment
// gaps inside its shard as padding; the tail padding past numel_unpadded belongs to the layout and
// is neither written nor declared. Values come from a callback, in pieces of at most piece_elems, so
// memory stays bounded whatever the fragment size.
//
// plan_optimizer_state is the pure part (which keys, which ranges, which padding): the save runs it
// with the pipeline as the source, `fpgather reshard` with another checkpoint as the source.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/index.h"
#include "ckpt/key_names.h"
#include "ckpt/state_store.h"
#include "layout/bucketed_layout.h"
#include "model/model_spec.h"

namespace fpg::ckpt {

// Fills out[0, n) with elements [lo, lo + n) of the flattened state `state` of spec param `param`.
using StateSource = std::function<void(uint32_t param, const std::string& state, uint64_t lo, uint64_t n, float* out)>;

// Elements [lo, lo + n) of that state in place: memory that stays alive and unchanged until the
// writer's finish() (the save borrows it instead of copying: StateWriter::write_borrowed).
using StateView = std::function<const float*(uint32_t param, const std::string& state, uint64_t lo, uint64_t n)>;

struct StateSaveOptions {
  ckpt::StateLayout layout = ckpt::StateLayout::model;
  std::vector<std::string> states;    // e.g. {"exp_avg", "exp_avg_sq"}
  uint64_t piece_elems = 16ull << 20;  // elements per write call (and buffer size of a StateSource)
};

// One contiguous write: param elements `param_range` of `state` go to key `key` at `key_lo`.
struct StateWrite {
  uint32_t key = 0;  // index into RankStatePlan::keys
  uint64_t key_lo = 0;
  uint32_t param = 0;
  std::string state;
  layout::Range param_range;
};

// What a rank declares and writes, in the order the save does it.
struct RankStatePlan {
  std::vector<ckpt::Key> keys;        // declaration order (F32, kind master or optimizer_state)
  std::vector<StateWrite> writes;
  std::vector<ckpt::Padding> padding;  // key indices into `keys`
};

// Rank `rank`'s share of every state of `layout` in opts.layout (opts.piece_elems unused).
RankStatePlan plan_optimizer_state(const model::ModelSpec& spec, const layout::BucketedLayout& layout, uint32_t rank,
                                   const StateSaveOptions& opts);

// Writes rank writer.rank()'s share of every state of `layout` (F32 keys of kind optimizer_state).
void save_optimizer_state(ckpt::StateWriter& writer, const model::ModelSpec& spec, const layout::BucketedLayout& layout,
                          const StateSaveOptions& opts, const StateSource& source);
// The same writes (the same file), the values read in place rather than copied through a buffer.
void save_optimizer_state_borrowed(ckpt::StateWriter& writer, const model::ModelSpec& spec, const layout::BucketedLayout& layout,
                                   const StateSaveOptions& opts, const StateView& view);

}  // namespace fpg::ckpt
