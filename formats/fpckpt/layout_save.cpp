#include "formats/fpckpt/layout_save.h"

#include <algorithm>

#include "core/error.h"

namespace fpg::fpckpt {
namespace {
// fp32 master weights are a state like the moments, but inspect counts them apart.
ckpt::KeyKind kind_of(const std::string& state) {
  return state == "master" ? ckpt::KeyKind::master : ckpt::KeyKind::optimizer_state;
}
}  // namespace

void save_optimizer_state(RankWriter& w, const model::ModelSpec& spec, const layout::BucketedLayout& L,
                          const StateSaveOptions& o, const StateSource& source) {
  const uint32_t r = w.rank();
  if (r >= L.dp) throw UsageError("save_optimizer_state: rank " + std::to_string(r) + " >= dp " + std::to_string(L.dp));
  std::vector<float> buf;
  // Writes param elements [plo, phi) of `state` at key offset `at`.
  auto write_piecewise = [&](uint32_t key, uint64_t at, uint32_t param, const std::string& state, uint64_t plo, uint64_t phi) {
    for (uint64_t x = plo; x < phi; x += o.piece_elems) {
      const uint64_t n = std::min(phi - x, o.piece_elems);
      buf.resize(n);
      source(param, state, x, n, buf.data());
      w.write(key, at + (x - plo), buf.data(), n);
    }
  };
  for (uint32_t b = 0; b < L.buffers.size(); ++b) {
    const auto& buf_l = L.buffers[b];
    for (uint32_t k = 0; k < buf_l.buckets.size(); ++k) {
      const auto& bucket = buf_l.buckets[k];
      const auto& shard = bucket.shards.at(r);
      for (const auto& state : o.states) {
        if (o.layout == ckpt::StateLayout::bucket) {
          const uint64_t n = bucket.numel_unpadded;
          const uint32_t key = w.declare({ckpt::bucket_state_key(b, k, state), DType::F32, {n}, kind_of(state)});
          for (const auto& f : shard.fragments)
            write_piecewise(key, f.world_in_bucket.begin, f.param, state, f.param_range.begin, f.param_range.end);
          for (const auto& p : shard.padding) {
            const layout::Range in = p.intersect({0, n});
            if (!in.empty()) w.declare_padding(key, in.begin, in.end);
          }
        } else {
          for (const auto& f : shard.fragments) {
            const auto& param = spec.params.at(f.param);
            const uint32_t key =
                w.declare({ckpt::model_state_key(param.name, state), DType::F32, param.shape, kind_of(state)});
            write_piecewise(key, f.param_range.begin, f.param, state, f.param_range.begin, f.param_range.end);
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
          w.declare({ckpt::model_state_key(slot.name, state), DType::F32, spec.params.at(slot.param).shape,
                     kind_of(state)});
}

}  // namespace fpg::fpckpt
