// What one rank keeps between steps, in plain structs (the checkpoint code saves and loads them):
// fp32 masters and optimizer moments of what the rank updates, addressed per fragment through an
// explicit param -> fragment map (never by position in a param group: Megatron reorders a group to
// fp32 params first, so a position from buffer order can name another tensor), and the
// FP8 scale state of every FP8 parameter (identical on all ranks).
//
// Arenas are filled once at construction and keep their sizes; a loader overwrites their contents
// (same sizes), it does not reshape them.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "fp8/delayed.h"
#include "fp8/shard.h"
#include "layout/range.h"
#include "optim/routing.h"

namespace fpg::pipeline {

// One contiguous piece of one parameter that this rank updates: a bucketed fragment (part of a
// param) or a whole layer-wise matrix.
struct StateFragment {
  uint32_t param = 0;          // index in ModelSpec::params
  layout::Range param_range;   // elements [begin, end) of the flattened param
  uint64_t param_numel = 0;    // the whole param's numel (Adam's tail rounding needs it)
  uint64_t offset = 0;         // where its elements start in every arena below
};

// The optimizer state of one part (bucketed fragments, or the whole matrices this rank owns).
struct OptimizerState {
  optim::OptimizerKind kind = optim::OptimizerKind::adamw;
  int64_t step = 0;  // optimizer steps taken (not counting skipped ones); Adam's bias correction
  std::vector<StateFragment> fragments;
  // param -> indices into `fragments` (the explicit slot map).
  std::map<uint32_t, std::vector<uint32_t>> by_param;
  // Arenas of numel() floats each, or empty when the optimizer has no such state:
  std::vector<float> master;      // fp32 master weights (fp32-kept params: the param itself)
  std::vector<float> exp_avg;     // Adam/AdamW/Lion first moment
  std::vector<float> exp_avg_sq;  // Adam/AdamW only — Lion has none
  std::vector<float> momentum;    // Muon's momentum_buffer

  uint64_t numel() const { return master.size(); }
  // Appends a fragment and returns its index; arenas are sized by allocate().
  uint32_t add(uint32_t param, layout::Range range, uint64_t param_numel);
  // Sizes the arenas (zero moments) for `kind`.
  void allocate();
  // The fragment of `param` covering element `element`, or null.
  const StateFragment* find(uint32_t param, uint64_t element) const;
};

// The names of the state an optimizer keeps (checkpoint keys): adam/adamw {exp_avg, exp_avg_sq},
// lion {exp_avg}, muon {momentum_buffer}.
std::vector<const char*> state_keys(optim::OptimizerKind kind);

// The scale state of one FP8 parameter, held by every rank alike.
struct Fp8ParamState {
  uint32_t param = 0;
  fp8::Scales scales;         // the grids the param's current bytes were cast with
  fp8::DelayedState delayed;  // delayed scaling only (history and next scale)
};

struct RankState {
  uint32_t rank = 0, dp = 1;
  OptimizerState bucketed;    // the bucketed fragments (with layerwise: the non-matrix params)
  OptimizerState layer_wise;  // layerwise only: the matrices this rank owns, whole
  std::vector<Fp8ParamState> fp8;  // every FP8 param, spec order
};

}  // namespace fpg::pipeline
