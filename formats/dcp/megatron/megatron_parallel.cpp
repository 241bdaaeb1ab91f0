#include "formats/dcp/megatron/megatron_parallel.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/printable.h"
#include "core/shape.h"

namespace fpg::dcp {

namespace {

// Gated MLPs store linear_fc1 as its w and v halves (Megatron's swiglu sharded state dict).
bool is_fc1(const MegatronParam& p) { return p.key.find("linear_fc1.") != std::string::npos; }

bool is_full(const Box& b, const std::vector<uint64_t>& shape) {
  return b.sizes == shape && std::all_of(b.offsets.begin(), b.offsets.end(), [](uint64_t o) { return o == 0; });
}

std::string chunk_list(const std::vector<const Box*>& chunks) {
  std::string s;
  for (size_t i = 0; i < chunks.size() && i < 8; ++i)
    s += (i ? ", " : "") + shape_string(chunks[i]->offsets) + "+" + shape_string(chunks[i]->sizes);
  if (chunks.size() > 8) s += ", …";
  return s;
}
std::string chunk_list(const std::vector<Box>& chunks) {
  std::vector<const Box*> all;
  for (const Box& c : chunks) all.push_back(&c);
  return chunk_list(all);
}

// The TP size of a set of parameters: see the header.
uint32_t tp_of(const std::vector<MegatronParam>& params, bool experts) {
  uint64_t t = 0, fc1 = 0;
  for (const MegatronParam& p : params) {
    if (p.expert.has_value() != experts || p.chunks.size() < 2) continue;
    uint64_t& m = is_fc1(p) ? fc1 : t;
    m = m ? std::min<uint64_t>(m, p.chunks.size()) : p.chunks.size();
  }
  const uint64_t tp = t ? t : fc1 ? fc1 / 2 : 1;
  return static_cast<uint32_t>(std::max<uint64_t>(tp, 1));
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The axis Megatron's parallel linears split a parameter along (see tensor_parallel_params), or
// SIZE_MAX when it is replicated.
size_t parallel_linear_axis(const std::string& name) {
  for (const char* column : {".linear_qkv.weight", ".linear_qkv.bias", ".linear_fc1.weight", ".linear_fc1.bias",
                             "word_embeddings.weight", "output_layer.weight"})
    if (ends_with(name, column)) return 0;
  for (const char* row : {".linear_proj.weight", ".linear_fc2.weight"})
    if (ends_with(name, row)) return 1;
  return SIZE_MAX;
}

}  // namespace

std::vector<MegatronParam> tensor_parallel_params(const std::vector<MegatronParam>& params, uint32_t dense_from,
                                                  uint32_t dense_to, uint32_t expert_from, uint32_t expert_to) {
  std::vector<MegatronParam> out = params;
  for (MegatronParam& p : out) {
    if (p.shape.empty()) continue;
    const uint32_t from_tp = p.expert ? expert_from : dense_from, tp = p.expert ? expert_to : dense_to;
    const std::string what = "parameter " + quoted_name(p.name) + " " + shape_string(p.shape);
    // How the parameter is split: the axis its stored chunks are cut along, gated or not.
    size_t axis = SIZE_MAX;
    bool gated = false;
    if (from_tp == 1) {
      axis = p.chunks.size() == 1 ? parallel_linear_axis(p.name) : 0;
      gated = is_fc1(p) && p.chunks.size() == 2;
    } else if (p.chunks.size() > 1) {
      for (size_t d = 0; d < p.shape.size() && axis == SIZE_MAX; ++d)
        for (const Box& c : p.chunks)
          if (c.offsets.size() == p.shape.size() && c.offsets[d] != p.chunks[0].offsets[d]) axis = d;
      gated = is_fc1(p) && axis == 0 && p.chunks.size() == 2 * uint64_t{from_tp};
    }
    if (axis >= p.shape.size()) {
      p.chunks = {Box{std::vector<uint64_t>(p.shape.size(), 0), p.shape}};
      continue;
    }
    const uint64_t n = p.shape[axis], parts = gated ? 2 * uint64_t{tp} : tp;
    if (n % parts != 0)
      throw UsageError(what + " does not split over " + std::to_string(tp) + " tensor-parallel ranks: its axis " +
                       std::to_string(axis) + " (" + std::to_string(n) + ") is not a multiple of " +
                       std::to_string(parts) + (gated ? " (a gated linear_fc1: its w and v halves each split)" : ""));
    p.chunks.clear();
    for (uint64_t i = 0; i < parts; ++i) {
      Box b{std::vector<uint64_t>(p.shape.size(), 0), p.shape};
      b.offsets[axis] = i * (n / parts);
      b.sizes[axis] = n / parts;
      p.chunks.push_back(std::move(b));
    }
  }
  return out;
}

bool LocalParam::whole() const {
  return pieces.size() == 1 && pieces[0].local_start == 0 && local.shape == pieces[0].box.sizes &&
         std::all_of(pieces[0].box.offsets.begin(), pieces[0].box.offsets.end(), [](uint64_t o) { return o == 0; });
}

ParallelModel::ParallelModel(const std::vector<MegatronParam>& params) : params_(params) {
  first_layered_ = params.size();
  for (size_t i = 0; i < params.size(); ++i) {
    const MegatronParam& p = params[i];
    if (p.layer) {
      first_layered_ = std::min(first_layered_, i);
      layers_ = std::max<uint64_t>(layers_, *p.layer + 1);
    }
    if (p.expert) experts_ = std::max<uint64_t>(experts_, *p.expert + 1);
    if (p.name == "embedding.word_embeddings.weight") embedding_ = i;
    if (p.name == "output_layer.weight") has_output_layer_ = true;
  }
  tp_ = tp_of(params, false);
  etp_ = tp_of(params, true);
}

LocalParam ParallelModel::local_of(size_t p, uint32_t rank, uint32_t T) const {
  const MegatronParam& mp = params_[p];
  LocalParam lp;
  lp.param = p;
  // The whole parameter's description, without its chunks (the pieces below say what is local): a
  // rank's local parameters are built per group, and a copy of every TP piece each was most of it.
  lp.local.name = mp.name;
  lp.local.key = mp.key;
  lp.local.layer = mp.layer;
  lp.local.expert = mp.expert;
  lp.local.shape = mp.shape;
  lp.local.dtype = mp.dtype;
  lp.local.key_offset = mp.key_offset;
  lp.local.own_bucket = mp.own_bucket;
  const std::vector<Box>& chunks = mp.chunks;
  auto what = [&] { return "model key " + quoted_name(mp.key) + " (parameter " + quoted_name(mp.name) + ")"; };
  if (chunks.empty()) throw FormatError(what() + " has no stored chunk");
  if (chunks.size() == 1) {
    if (!is_full(chunks[0], mp.shape))
      throw FormatError(what() + " stores one chunk, " + chunk_list(chunks) + ", not the whole shape " +
                        shape_string(mp.shape));
    lp.pieces.push_back({chunks[0], 0});
    return lp;
  }
  // The one axis the chunks are cut along.
  size_t axis = SIZE_MAX;
  for (size_t d = 0; d < mp.shape.size(); ++d)
    for (const Box& c : chunks)
      if (c.offsets.size() == mp.shape.size() && c.offsets[d] != chunks[0].offsets[d]) {
        if (axis != SIZE_MAX && axis != d)
          throw FormatError(what() + " has chunks cut along more than one axis (" + chunk_list(chunks) +
                            "); Megatron splits a parameter over tensor-parallel ranks along one");
        axis = d;
      }
  if (axis == SIZE_MAX) throw FormatError(what() + " stores " + std::to_string(chunks.size()) + " chunks at one offset");
  std::vector<const Box*> sorted;  // by offset along the axis
  sorted.reserve(chunks.size());
  for (const Box& c : chunks) sorted.push_back(&c);
  std::sort(sorted.begin(), sorted.end(), [&](const Box* a, const Box* b) { return a->offsets[axis] < b->offsets[axis]; });
  const bool gated = is_fc1(mp) && axis == 0 && chunks.size() == 2 * uint64_t{T};
  if (chunks.size() != T && !gated)
    throw FormatError(what() + " has " + std::to_string(chunks.size()) + " chunks along axis " + std::to_string(axis) +
                      " (" + chunk_list(sorted) + "), which do not split over " + std::to_string(T) +
                      " tensor-parallel ranks (" + std::to_string(T) + " chunks, or " + std::to_string(2 * T) +
                      " for a gated linear_fc1)");
  if (!gated) {
    lp.local.shape = sorted[rank]->sizes;
    lp.pieces.push_back({*sorted[rank], 0});
    return lp;
  }
  const Box& w = *sorted[rank];
  const Box& v = *sorted[T + rank];
  if (T == 1) {  // [w_0; v_0] is the parameter itself
    lp.pieces.push_back({Box{std::vector<uint64_t>(mp.shape.size(), 0), mp.shape}, 0});
    return lp;
  }
  lp.local.shape = w.sizes;
  lp.local.shape[0] += v.sizes[0];
  lp.pieces.push_back({w, 0});
  lp.pieces.push_back({v, shape_volume(w.sizes)});
  return lp;
}

std::vector<LocalParam> ParallelModel::dense_rank(uint32_t tp, uint64_t first, uint64_t count, bool first_stage,
                                                  bool last_stage, std::optional<ExpertOrder> experts) const {
  std::vector<LocalParam> out;
  std::optional<uint64_t> experts_added;  // the last layer whose experts are in
  for (size_t p = 0; p < params_.size(); ++p) {
    const MegatronParam& mp = params_[p];
    const bool held = mp.layer ? *mp.layer >= first && *mp.layer - first < count
                               : (p < first_layered_ ? first_stage : last_stage);
    if (!held) continue;
    if (mp.expert) {
      if (experts && experts_added != mp.layer) {
        for (LocalParam& lp : expert_rank(tp, 0, 1, *mp.layer, 1, *experts)) out.push_back(std::move(lp));
        experts_added = mp.layer;
      }
      continue;
    }
    out.push_back(local_of(p, tp, tp_));
    // At PP > 1 a tied embedding is Megatron's shared embedding on the first stage.
    if (tied_output() && embedding_ == p && !last_stage) out.back().local.own_bucket = true;
  }
  // An output layer tied to the embedding: the last stage registers its own copy after the final
  // norm, checkpointed under the embedding's key (a replica of the first stage's).
  if (tied_output() && last_stage && !first_stage) {
    LocalParam copy = local_of(*embedding_, tp, tp_);
    copy.local.name = "output_layer.weight";
    copy.local.own_bucket = true;
    out.push_back(std::move(copy));
  }
  return out;
}

std::vector<LocalParam> ParallelModel::expert_rank(uint32_t etp, uint32_t ep, uint32_t eps, uint64_t first,
                                                   uint64_t count, ExpertOrder order) const {
  if (eps == 0 || experts_ % eps != 0)
    throw FormatError(std::to_string(experts_) + " experts per layer do not divide over " + std::to_string(eps) +
                      " expert-parallel ranks");
  const uint64_t local = experts_ / eps, lo = uint64_t{ep} * local;
  std::vector<LocalParam> out;
  for (uint64_t layer = first; layer < first + count; ++layer) {
    std::vector<std::string> keys;             // the layer's expert keys, registration order
    std::map<std::pair<std::string, uint64_t>, size_t> at;  // (key, expert) -> parameter
    for (size_t p = 0; p < params_.size(); ++p) {
      const MegatronParam& mp = params_[p];
      if (!mp.expert || mp.layer != layer) continue;
      if (std::find(keys.begin(), keys.end(), mp.key) == keys.end()) keys.push_back(mp.key);
      at[{mp.key, *mp.expert}] = p;
    }
    auto add = [&](const std::string& key, uint64_t e) {
      auto it = at.find({key, e});
      if (it != at.end()) out.push_back(local_of(it->second, etp, etp_));
    };
    if (order == ExpertOrder::sequential) {
      for (uint64_t e = lo; e < lo + local; ++e)
        for (const std::string& key : keys) add(key, e);
    } else {
      for (const std::string& key : keys)
        for (uint64_t e = lo; e < lo + local; ++e) add(key, e);
    }
  }
  return out;
}

}  // namespace fpg::dcp
