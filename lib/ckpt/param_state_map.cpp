#include "ckpt/param_state_map.h"

#include <unordered_map>

#include "ckpt/stored_states.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/shape.h"
#include "layout/layout_json.h"
#include "model/spec_json.h"

namespace fpg::ckpt {
namespace {

std::string document(const Index& index, const char* name, const std::string& source) {
  const auto text = index.documents.get(name);
  if (!text) throw FormatError(source + ": the index has no " + quoted_name(name) + " document: not a training checkpoint");
  return *text;
}

}  // namespace

ParamStateMap ParamStateMap::from_index(const Index& index, const std::string& source) {
  ParamStateMap m;
  m.spec_ = model::parse_spec_json(document(index, doc::model, source), source + ": document 'model'");
  const JsonDocument opt(document(index, doc::optimizer, source), source + ": document 'optimizer'");
  const StoredStates stored = read_stored_states(opt.root());
  m.state_layout_ = stored.layout;
  m.states_ = stored.states;
  const std::string layout_text = document(index, doc::layout, source);
  const std::string kind = JsonDocument(layout_text, source + ": document 'layout'").root().get<std::string>("kind");

  const size_t n = m.spec_.params.size();
  m.slots_.assign(n, Slot{});
  std::vector<bool> placed(n, false);
  layout::BucketedLayout bucketed;
  if (kind == "layer_wise") {
    const layout::LayerWiseLayout lw = layout::layer_wise_layout_from_json(layout_text, source + ": document 'layout'");
    m.matrix_states_ = stored.matrix_states;
    for (const auto& mx : lw.matrices) {
      if (mx.param >= n) throw FormatError(source + ": document 'layout': matrix param #" + std::to_string(mx.param) + " is not in the model");
      m.slots_[mx.param].matrix = true;  // always layout `model` keys
      placed[mx.param] = true;
    }
    bucketed = lw.scalar;
  } else if (kind == "bucketed") {
    bucketed = layout::bucketed_layout_from_json(layout_text, source + ": document 'layout'");
  } else {
    throw FormatError(source + ": document 'layout': unknown kind " + quoted_name(kind));
  }
  for (uint32_t b = 0; b < bucketed.buffers.size(); ++b) {
    const layout::Buffer& buf = bucketed.buffers[b];
    for (const layout::ParamSlot& s : buf.params) {
      if (s.param >= n || placed[s.param])
        throw FormatError(source + ": document 'layout': param #" + std::to_string(s.param) + " placed twice or not in the model");
      placed[s.param] = true;
      Slot& slot = m.slots_[s.param];
      if (m.state_layout_ == StateLayout::bucket) {
        slot.whole = false;
        slot.buffer = b;
        slot.bucket = s.bucket;
        slot.bucket_lo = s.world.begin - buf.buckets.at(s.bucket).world.begin;
      }
    }
  }

  // Resolve every key now: a checkpoint missing one is refused before anything is read.
  std::unordered_map<std::string, uint32_t> by_name;
  for (uint32_t k = 0; k < index.keys.size(); ++k) by_name.emplace(index.keys[k].name, k);
  m.keys_.resize(n);
  for (uint32_t p = 0; p < n; ++p) {
    const model::Param& param = m.spec_.params[p];
    if (!placed[p]) throw FormatError(source + ": document 'layout' does not place param " + quoted_name(param.name));
    const Slot& slot = m.slots_[p];
    for (const std::string& s : m.states_of(p)) {
      uint64_t numel = param.numel();
      std::string name = model_state_key(param.name, s);
      if (!slot.whole) {
        const layout::Bucket& bk = bucketed.buffers[slot.buffer].buckets[slot.bucket];
        name = bucket_state_key(slot.buffer, slot.bucket, s);
        numel = bk.numel_unpadded;
      }
      const auto it = by_name.find(name);
      if (it == by_name.end()) throw FormatError(source + ": no key " + quoted_name(name) + " (state " + s + " of " + quoted_name(param.name) + ")");
      const Key& key = index.keys[it->second];
      if (key.dtype != DType::F32 || key.numel() != numel || (!slot.whole && slot.bucket_lo + param.numel() > numel))
        throw FormatError(source + ": key " + quoted_name(name) + " is " + std::string(dtype_name(key.dtype)) + " " +
                          shape_string(key.shape) + "; the layout implies F32 of " + std::to_string(numel) + " elements");
      m.keys_[p].push_back(it->second);
    }
  }
  return m;
}

const std::vector<std::string>& ParamStateMap::states_of(uint32_t param) const {
  return slots_.at(param).matrix ? matrix_states_ : states_;
}

uint32_t ParamStateMap::key_of(uint32_t param, const std::string& state) const {
  const auto& names = states_of(param);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == state) return keys_[param][i];
  throw UsageError("param " + quoted_name(spec_.params.at(param).name) + " has no optimizer state " + quoted_name(state));
}

std::vector<StatePiece> ParamStateMap::pieces(uint32_t param, const std::string& state, uint64_t lo, uint64_t hi) const {
  const uint64_t numel = spec_.params.at(param).numel();
  if (lo > hi || hi > numel)
    throw UsageError("param " + quoted_name(spec_.params[param].name) + ": range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + ") is outside [0, " + std::to_string(numel) + ")");
  const uint32_t key = key_of(param, state);
  if (lo == hi) return {};
  // Either layout stores a param contiguously in one key: one piece.
  const Slot& slot = slots_[param];
  return {StatePiece{key, (slot.whole ? 0 : slot.bucket_lo) + lo, lo, hi - lo}};
}

}  // namespace fpg::ckpt
