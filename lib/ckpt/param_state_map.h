// Where each parameter's fp32 master and optimizer states lie in a training checkpoint, whatever
// its state layout (ckpt/key_names.h): layout `model` keys hold a param whole; layout `bucket` keys
// hold the params of a bucket at their slots, which only the layout the index records can tell.
// The map is built from the index's documents (model spec, layout, optimizer) and checked against
// its keys, so a reader (export, re-encode, reshard) can ask for "param P, state S, elements
// [lo, hi)" and get the key ranges to read, without knowing the layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/index.h"
#include "ckpt/key_names.h"
#include "model/model_spec.h"

namespace fpg::ckpt {

// Elements [param_lo, param_lo + numel) of a param's state are elements [key_lo, key_lo + numel)
// of key `key` (an index into Index::keys).
struct StatePiece {
  uint32_t key = 0;
  uint64_t key_lo = 0;
  uint64_t param_lo = 0;
  uint64_t numel = 0;
};

class ParamStateMap {
 public:
  // FormatError naming `source` when a document is missing or malformed, or a key the layout
  // implies is absent or has another dtype or extent.
  static ParamStateMap from_index(const Index& index, const std::string& source);

  const model::ModelSpec& spec() const { return spec_; }
  StateLayout state_layout() const { return state_layout_; }
  // The state names param p has, "master" first (layer-wise matrices may differ from the rest).
  const std::vector<std::string>& states_of(uint32_t param) const;
  // Pieces of param p's state `state` that overlap [lo, hi), clipped to it, by param offset; they
  // tile [lo, hi). UsageError for a state the param does not have.
  std::vector<StatePiece> pieces(uint32_t param, const std::string& state, uint64_t lo, uint64_t hi) const;

 private:
  struct Slot {
    bool whole = true;  // a layout `model` key ("optimizer/<param>/<state>")
    uint32_t buffer = 0, bucket = 0;
    uint64_t bucket_lo = 0;  // the param's first element in the bucket key
    bool matrix = false;     // a layer-wise matrix (matrix_states)
  };
  uint32_t key_of(uint32_t param, const std::string& state) const;

  model::ModelSpec spec_;
  StateLayout state_layout_ = StateLayout::model;
  std::vector<std::string> states_, matrix_states_;
  std::vector<Slot> slots_;
  std::vector<std::vector<uint32_t>> keys_;  // [param][state index] -> key
};

}  // namespace fpg::ckpt
