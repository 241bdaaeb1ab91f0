#include "cmd/bench/synthetic_megatron.h"

#include <cstring>
#include <vector>

#include "cmd/bench/synthetic_dcp.h"
#include "cmd/bench/timing.h"
#include "ckpt/index.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "core/thread_pool.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/megatron/bucket_writer.h"
#include "formats/dcp/megatron/megatron_keys.h"
#include "formats/dcp/megatron/megatron_layout.h"
#include "formats/dcp/megatron/megatron_parallel.h"
#include "layout/bucketed_layout.h"

namespace fpg::bench {
namespace {

using dcp::Value;

// A stored model key and, per chunk, the TP rank and pipeline stage that write it.
struct SynthKey {
  dcp::ModelKey key;
  std::vector<uint32_t> tp, stage;
};

// How a parameter's TP pieces split it.
enum class Split { replicated, axis0, axis1, gated };

// Adds key `name` of per-parameter shape `shape`, stacked over `layers` layers when layers > 0, its
// chunks the TP pieces of each layer; non-stacked keys live on `stage`.
void add_key(std::vector<SynthKey>& keys, const std::string& name, DType dtype, std::vector<uint64_t> shape, Split split,
             uint32_t T, uint64_t layers, uint64_t layers_per_stage, uint32_t stage) {
  SynthKey k;
  k.key.key = name;
  k.key.dtype = dtype;
  const bool stacked = layers > 0;
  k.key.shape = shape;
  if (stacked) k.key.shape.insert(k.key.shape.begin(), layers);
  const size_t a = stacked ? 1 : 0;  // first axis of the parameter's own shape
  for (uint64_t l = 0; l < (stacked ? layers : 1); ++l) {
    std::vector<uint64_t> off(k.key.shape.size(), 0), size = k.key.shape;
    if (stacked) {
      off[0] = l;
      size[0] = 1;
    }
    const uint32_t st = stacked ? static_cast<uint32_t>(l / layers_per_stage) : stage;
    auto piece = [&](size_t axis, uint64_t begin, uint64_t len, uint32_t t) {
      std::vector<uint64_t> o = off, s = size;
      o[axis] = begin;
      s[axis] = len;
      k.key.chunks.push_back({o, s});
      k.tp.push_back(t);
      k.stage.push_back(st);
    };
    switch (split) {
      case Split::replicated:
        piece(a, 0, shape[0], 0);
        break;
      case Split::axis0:
      case Split::axis1: {
        const size_t axis = a + (split == Split::axis1 ? 1 : 0);
        const uint64_t n = k.key.shape[axis] / T;
        for (uint32_t t = 0; t < T; ++t) piece(axis, t * n, n, t);
        break;
      }
      case Split::gated: {  // [w_0 … w_{T-1}, v_0 … v_{T-1}] along the output axis
        const uint64_t n = k.key.shape[a] / (2 * T);
        for (uint32_t h = 0; h < 2; ++h)
          for (uint32_t t = 0; t < T; ++t) piece(a, (h * T + t) * n, n, t);
        break;
      }
    }
  }
  keys.push_back(std::move(k));
}

// A deterministic value pattern: small multiples of 1/128, exact in bf16 and fp32.
float pattern(uint64_t seed, uint64_t i) { return static_cast<float>(static_cast<int64_t>((i * 7 + seed) % 251) - 125) / 128; }

dcp::FillBytes fill_pattern(DType dtype, uint64_t seed, uint64_t first) {
  return [dtype, seed, first](uint64_t offset, void* dst, size_t size) {
    auto* p = static_cast<uint8_t*>(dst);
    const size_t w = dtype == DType::BF16 ? 2 : 4;
    for (size_t b = 0; b < size; b += w) {
      const float v = pattern(seed, first + (offset + b) / w);
      if (w == 2) {
        const uint16_t h = bf16_from_float(v);
        std::memcpy(p + b, &h, std::min<size_t>(2, size - b));
      } else {
        std::memcpy(p + b, &v, std::min<size_t>(4, size - b));
      }
    }
  };
}

}  // namespace

SyntheticMegatronSummary make_synthetic_megatron(const SyntheticMegatronOptions& o) {
  const uint32_t T = o.tp, P = o.pp, D = o.dp;
  if (!T || !P || !D || !o.layers || !o.hidden || !o.ffn || !o.heads || !o.query_groups || !o.vocab)
    throw UsageError("every size of a synthetic Megatron checkpoint must be positive");
  if (o.layers % P) throw UsageError(std::to_string(o.layers) + " layers do not divide over " + std::to_string(P) + " pipeline stages");
  if (o.heads % o.query_groups || o.query_groups % T || o.vocab % T || o.ffn % T || o.hidden % o.heads)
    throw UsageError("heads, query groups, vocabulary and ffn must divide over TP " + std::to_string(T) +
                     " (and the hidden size over the heads, the heads over the query groups)");
  // Sizes that describe more than a benchmark could write: checked before anything is allocated.
  using u128 = unsigned __int128;
  if (u128{T} * P * D > ckpt::kMaxRanks)
    throw UsageError("TP x PP x DP is more than the " + std::to_string(ckpt::kMaxRanks) + " ranks a checkpoint may hold");
  const u128 per_layer = u128{o.hidden} * (4 * o.hidden + 3 * o.ffn);
  if (u128{o.layers} * per_layer + u128{2} * o.vocab * o.hidden > u128{1} << 36)
    throw UsageError("the model has more than 2^36 parameters: more than a synthetic benchmark checkpoint should write");
  if (u128{o.layers} * 8 * T > 100'000'000)
    throw UsageError("layers x TP pieces give more than 10^8 model chunks");
  const double t0 = wall_seconds();
  const uint64_t H = o.hidden, F = o.ffn, Ls = o.layers / P, d = H / o.heads;
  const uint64_t qkv = (o.heads + 2 * o.query_groups) * d;

  std::vector<SynthKey> keys;
  add_key(keys, "module.embedding.word_embeddings.weight", DType::BF16, {o.vocab, H}, Split::axis0, T, 0, Ls, 0);
  add_key(keys, "module.decoder.layers.self_attention.linear_qkv.layer_norm_weight", DType::F32, {H}, Split::replicated, T, o.layers, Ls, 0);
  add_key(keys, "module.decoder.layers.self_attention.linear_proj.weight", DType::BF16, {H, H}, Split::axis1, T, o.layers, Ls, 0);
  add_key(keys, "module.decoder.layers.self_attention.linear_qkv.weight", DType::BF16, {qkv, H}, Split::axis0, T, o.layers, Ls, 0);
  add_key(keys, "module.decoder.layers.mlp.linear_fc1.layer_norm_weight", DType::F32, {H}, Split::replicated, T, o.layers, Ls, 0);
  add_key(keys, "module.decoder.layers.mlp.linear_fc1.weight", DType::BF16, {2 * F, H}, Split::gated, T, o.layers, Ls, 0);
  add_key(keys, "module.decoder.layers.mlp.linear_fc2.weight", DType::BF16, {H, F}, Split::axis1, T, o.layers, Ls, 0);
  add_key(keys, "module.decoder.final_layernorm.weight", DType::F32, {H}, Split::replicated, T, 0, Ls, P - 1);
  add_key(keys, "module.output_layer.weight", DType::BF16, {o.vocab, H}, Split::axis0, T, 0, Ls, P - 1);

  std::vector<dcp::ModelKey> model_keys;
  for (const SynthKey& k : keys) model_keys.push_back(k.key);
  const std::vector<dcp::MegatronParam> params = dcp::megatron_params(model_keys);
  const dcp::ParallelModel model(params);

  // The groups' layouts, over their ranks' local parameters.
  struct Group {
    uint32_t tp, pp;
    std::vector<dcp::LocalParam> locals;
    layout::BucketedLayout layout;
  };
  std::vector<Group> groups;
  layout::BucketedOptions lo;
  lo.dp = D;
  lo.bucket_size = o.bucket_size;
  for (uint32_t p = 0; p < P; ++p)
    for (uint32_t t = 0; t < T; ++t) {
      Group g{t, p, model.dense_rank(t, p * Ls, Ls, p == 0, p + 1 == P), {}};
      std::vector<dcp::MegatronParam> local;
      for (const dcp::LocalParam& lp : g.locals) local.push_back(lp.local);
      g.layout = layout::build_bucketed_layout(dcp::megatron_spec(local), lo);
      groups.push_back(std::move(g));
    }
  auto rank_file = [&](uint32_t t, uint32_t p, uint32_t dp_rank) { return t + T * (dp_rank + D * p); };

  dcp::DcpWriteOptions wo;
  wo.megatron = dcp::megatron_torch_dist_metadata();
  wo.planner_data = false;
  dcp::DcpWriter w(o.dir, wo);
  for (const SynthKey& k : keys)
    w.declare_tensor(k.key.key, *dcp::find_torch_dtype(k.key.dtype == DType::BF16 ? "bfloat16" : "float32"), k.key.shape);
  w.declare_bytes(std::string(dcp::kCommonStatePrefix) + "shard_0_1");
  const std::vector<std::string> states = {"param", "exp_avg", "exp_avg_sq"};
  std::vector<std::string> prefixes;
  for (size_t g = 0; g < groups.size(); ++g) {
    prefixes.push_back("optimizer.distributed.dp_group_idx_" + std::to_string(g));
    w.declare_bytes(dcp::group_object_key(prefixes[g], dcp::kParamGroups));
    dcp::declare_group_buckets(w, prefixes[g], groups[g].layout, states);
  }

  const Value param_groups = dcp::wrap_object(Value::dict(
      {{Value::str("param_groups"),
        Value::sequence(Value::Kind::list,
                        {Value::dict({{Value::str("lr"), Value::floating(1e-3)},
                                      {Value::str("betas"), Value::sequence(Value::Kind::tuple, {Value::floating(0.9), Value::floating(0.95)})},
                                      {Value::str("eps"), Value::floating(1e-8)},
                                      {Value::str("weight_decay"), Value::floating(0.01)},
                                      {Value::str("step"), Value::floating(1.0)}})})}}));
  ThreadPool::global().parallel_for(groups.size(), [&](size_t gi) {
    const Group& g = groups[gi];
    // The model chunks this group's (tp, stage) holds, written by its DP rank 0.
    dcp::DcpRankWriter& first = w.rank(rank_file(g.tp, g.pp, 0));
    for (size_t ki = 0; ki < keys.size(); ++ki) {
      const SynthKey& k = keys[ki];
      for (size_t c = 0; c < k.key.chunks.size(); ++c) {
        if (k.tp[c] != g.tp || k.stage[c] != g.pp) continue;
        const dcp::Box& b = k.key.chunks[c];
        first.write_tensor(k.key.key, b.offsets, b.sizes, fill_pattern(k.key.dtype, ki, c << 20));
      }
    }
    if (gi == 0) {
      const Value common = dcp::wrap_object(Value::dict(
          {{Value::str("optimizer"), Value::dict({{Value::str("param_state_sharding_type"), Value::str("dp_reshardable")}})},
           {Value::str("iteration"), Value::integer(1)},
           {Value::str("content_metadata"),
            Value::dict({{Value::str(dcp::kShardingTypeField), Value::str("dp_reshardable")}})}}));
      first.write_object(std::string(dcp::kCommonStatePrefix) + "shard_0_1", common);
    }
    first.write_object(dcp::group_object_key(prefixes[gi], dcp::kParamGroups), param_groups);
    dcp::write_group_buckets(
        w, prefixes[gi], g.layout, states, rank_file(g.tp, g.pp, 0),
        [&](uint32_t d) { return rank_file(g.tp, g.pp, d); },
        [&](uint32_t param, const std::string& state, uint64_t begin) {
          return fill_pattern(DType::F32, gi * 131 + param * 7 + state.size(), begin);
        });
  });
  const dcp::Metadata written = w.commit();

  SyntheticMegatronSummary s;
  s.groups = groups.size();
  s.ranks = uint64_t{T} * P * D;
  s.keys = written.entries.size();
  s.chunks = written.chunk_count();
  for (const dcp::Entry& e : written.entries)
    if (e.is_tensor) s.tensor_bytes += e.tensor.numel() * e.tensor.dtype->element_bytes;
  const DcpFileSizes sizes = dcp_file_sizes(o.dir);
  s.file_bytes = sizes.files;
  s.metadata_bytes = sizes.metadata;
  s.seconds = wall_seconds() - t0;
  return s;
}

}  // namespace fpg::bench
