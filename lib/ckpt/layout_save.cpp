#include "ckpt/layout_save.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"

namespace fpg::ckpt {
namespace {
// fp32 master weights are a state like the moments, but inspect counts them apart.
ckpt::KeyKind kind_of(const std::string& state) {
  return state == "master" ? ckpt::KeyKind::master : ckpt::KeyKind::optimizer_state;
}
}  // namespace

RankStatePlan plan_optimizer_state(const model::ModelSpec& spec, const layout::BucketedLayout& L, uint32_t r,
                                   const StateSaveOptions& o) {
  if (r >= L.dp) throw UsageError("save_optimizer_state: rank " + std::to_string(r) + " >= dp " + std::to_string(L.dp));
  RankStatePlan plan;
  std::unordered_map<std::string, uint32_t> key_of;
  auto declare = [&](ckpt::Key key) {
    const auto it = key_of.find(key.name);
    if (it != key_of.end()) return it->second;
    const auto id = static_cast<uint32_t>(plan.keys.size());
    key_of.emplace(key.name, id);
    plan.keys.push_back(std::move(key));
    return id;
  };
  for (uint32_t b = 0; b < L.buffers.size(); ++b) {
    const auto& buf_l = L.buffers[b];
    for (uint32_t k = 0; k < buf_l.buckets.size(); ++k) {
      const auto& bucket = buf_l.buckets[k];
      const auto& shard = bucket.shards.at(r);
      for (const auto& state : o.states) {
        if (o.layout == ckpt::StateLayout::bucket) {
          const uint64_t n = bucket.numel_unpadded;
          const uint32_t key = declare({ckpt::bucket_state_key(b, k, state), DType::F32, {n}, kind_of(state)});
          for (const auto& f : shard.fragments)
            plan.writes.push_back({key, f.world_in_bucket.begin, f.param, state, f.param_range});
          for (const auto& p : shard.padding) {
            const layout::Range in = p.intersect({0, n});
            if (!in.empty()) plan.padding.push_back({key, in.begin, in.end});
          }
        } else {
          for (const auto& f : shard.fragments) {
            const auto& param = spec.params.at(f.param);
            const uint32_t key = declare({ckpt::model_state_key(param.name, state), DType::F32, param.shape, kind_of(state)});
            plan.writes.push_back({key, f.param_range.begin, f.param, state, f.param_range});
          }
        }
      }
    }
  }
  // Model layout: every rank declares every key, so a key whose params this rank does not touch is
  // still known to the index even if no rank wrote it (validation then reports the gap).
  if (o.layout == ckpt::StateLayout::model)
    for (const auto& buf_l : L.buffers)
      for (const auto& slot : buf_l.params)
        for (const auto& state : o.states)
          declare({ckpt::model_state_key(slot.name, state), DType::F32, spec.params.at(slot.param).shape, kind_of(state)});
  return plan;
}

namespace {
// Declares the plan's keys, hands each write to `put` in pieces of at most piece_elems (key id, key
// offset, param, state, param offset, n), then declares the padding.
template <class Put>
void save_plan(ckpt::StateWriter& w, const model::ModelSpec& spec, const layout::BucketedLayout& L, const StateSaveOptions& o,
               Put&& put) {
  const RankStatePlan plan = plan_optimizer_state(spec, L, w.rank(), o);
  std::vector<uint32_t> ids;
  for (const ckpt::Key& k : plan.keys) ids.push_back(w.declare(k));
  for (const StateWrite& s : plan.writes)
    for (uint64_t x = s.param_range.begin; x < s.param_range.end; x += o.piece_elems) {
      const uint64_t n = std::min(s.param_range.end - x, o.piece_elems);
      put(ids[s.key], s.key_lo + (x - s.param_range.begin), s.param, s.state, x, n);
    }
  for (const ckpt::Padding& p : plan.padding) w.declare_padding(ids[p.key], p.lo, p.hi);
}
}  // namespace

void save_optimizer_state(ckpt::StateWriter& w, const model::ModelSpec& spec, const layout::BucketedLayout& L,
                          const StateSaveOptions& o, const StateSource& source) {
  std::vector<float> buf;
  save_plan(w, spec, L, o, [&](uint32_t key, uint64_t key_lo, uint32_t param, const std::string& state, uint64_t x, uint64_t n) {
    buf.resize(n);
    source(param, state, x, n, buf.data());
    w.write(key, key_lo, buf.data(), n);
  });
}

void save_optimizer_state_borrowed(ckpt::StateWriter& w, const model::ModelSpec& spec, const layout::BucketedLayout& L,
                                   const StateSaveOptions& o, const StateView& view) {
  save_plan(w, spec, L, o, [&](uint32_t key, uint64_t key_lo, uint32_t param, const std::string& state, uint64_t x, uint64_t n) {
    w.write_borrowed(key, key_lo, view(param, state, x, n), n);
  });
}

}  // namespace fpg::ckpt
