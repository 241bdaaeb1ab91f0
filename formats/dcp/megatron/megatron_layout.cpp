#include "formats/dcp/megatron/megatron_layout.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "core/printable.h"
#include "core/error.h"
#include "core/shape.h"
#include "formats/dcp/torch_dtype.h"
#include "layout/padding.h"

namespace fpg::dcp {

namespace {

constexpr const char* kModulePrefix = "module.";

uint64_t numel_of(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string with_layer(const std::string& name, uint64_t layer) {
  const size_t at = name.rfind("layers.") + 7;
  return name.substr(0, at) + std::to_string(layer) + "." + name.substr(at);
}

std::string dtype_pair(DType p, DType g) {
  return "(" + std::string(dtype_name(p)) + ", " + std::string(dtype_name(g)) + ")";
}

std::string with_expert(const std::string& name, uint64_t expert) {
  const size_t at = name.rfind(".experts.") + 9;
  return name.substr(0, at) + std::to_string(expert) + "." + name.substr(at);
}

// The chunks of a model key by their offset along its first axis, to find those that hold one
// layer without a pass over all of them per layer (a stacked key has a chunk per layer and TP rank).
class ChunkIndex {
 public:
  explicit ChunkIndex(const ModelKey& key) : key_(key) {
    for (size_t c = 0; c < key.chunks.size(); ++c) {
      const Box& b = key.chunks[c];
      if (b.offsets.size() != key.shape.size() || b.sizes.size() != key.shape.size() || key.shape.empty()) continue;
      by_first_.push_back(c);  // validate reports the others
      span_ = std::max(span_, b.sizes[0]);
    }
    std::stable_sort(by_first_.begin(), by_first_.end(),
                     [&](size_t a, size_t b) { return key.chunks[a].offsets[0] < key.chunks[b].offsets[0]; });
  }
  // The chunks that hold the parameter at index `lead` of the key's first axes, in the parameter's
  // own coordinates and in the key's chunk order (a chunk spanning several layers holds each of them).
  std::vector<Box> inside(const std::vector<uint64_t>& lead) const {
    const size_t n = lead.size();
    std::vector<size_t> hits;
    auto holds = [&](const Box& c) {
      bool in = true;
      for (size_t d = 0; d < n; ++d) in = in && c.offsets[d] <= lead[d] && lead[d] - c.offsets[d] < c.sizes[d];
      return in;
    };
    if (n == 0) {
      hits = by_first_;
    } else {
      // The chunks starting at or before lead[0], back to those that may still reach it.
      auto it = std::upper_bound(by_first_.begin(), by_first_.end(), lead[0],
                                 [&](uint64_t v, size_t c) { return v < key_.chunks[c].offsets[0]; });
      while (it != by_first_.begin()) {
        --it;
        const Box& c = key_.chunks[*it];
        if (lead[0] - c.offsets[0] >= span_) break;
        if (holds(c)) hits.push_back(*it);
      }
    }
    std::sort(hits.begin(), hits.end());
    std::vector<Box> out;
    for (size_t c : hits) {
      const Box& b = key_.chunks[c];
      out.push_back({std::vector<uint64_t>(b.offsets.begin() + static_cast<std::ptrdiff_t>(n), b.offsets.end()),
                     std::vector<uint64_t>(b.sizes.begin() + static_cast<std::ptrdiff_t>(n), b.sizes.end())});
    }
    return out;
  }

 private:
  const ModelKey& key_;
  std::vector<size_t> by_first_;  // valid chunks by offset along the first axis
  uint64_t span_ = 0;             // the most layers one chunk spans
};

// N of a key naming its layer, "….layers.N.…" (the last "layers." of the key), up to 9 digits.
std::optional<uint64_t> layer_index(const std::string& key) {
  const size_t at = key.rfind("layers.");
  if (at == std::string::npos || (at > 0 && key[at - 1] != '.')) return std::nullopt;
  size_t i = at + 7, n = 0;
  uint64_t v = 0;
  while (i + n < key.size() && n < 10 && std::isdigit(static_cast<unsigned char>(key[i + n]))) {
    v = v * 10 + static_cast<uint64_t>(key[i + n] - '0');
    ++n;
  }
  if (n == 0 || n > 9 || i + n >= key.size() || key[i + n] != '.') return std::nullopt;
  return v;
}

// A layer's MoE expert key stacking its experts: "….layers.N.mlp.experts.NAME", NAME not an index.
bool is_layer_expert_key(const std::string& key) {
  const size_t at = key.rfind(".experts.");
  return key.find(".mlp.experts.") != std::string::npos && at != std::string::npos && at + 9 < key.size() &&
         !std::isdigit(static_cast<unsigned char>(key[at + 9]));
}

}  // namespace

bool is_expert_key(const std::string& key) {
  return is_stacked_key(key) && key.find(".mlp.experts.") != std::string::npos;
}

bool is_stacked_key(const std::string& key) {
  const size_t at = key.rfind("layers.");
  if (at == std::string::npos || (at > 0 && key[at - 1] != '.')) return false;
  const size_t next = at + 7;
  return next < key.size() && !std::isdigit(static_cast<unsigned char>(key[next]));
}

std::string strip_module_prefix(const std::string& key) {
  return key.rfind(kModulePrefix, 0) == 0 ? key.substr(7) : key;
}

std::vector<MegatronParam> megatron_params(const std::vector<ModelKey>& model_keys) {
  std::vector<const ModelKey*> before, stacked, after;
  std::optional<uint64_t> layers;
  for (const ModelKey& k : model_keys) {
    if (!is_stacked_key(k.key)) {
      (stacked.empty() ? before : after).push_back(&k);
      continue;
    }
    if (k.shape.empty())
      throw FormatError("model key " + quoted_name(k.key) + " stacks layers but has no layer axis (shape [])");
    if (layers && *layers != k.shape[0])
      throw FormatError("model key " + quoted_name(k.key) + " stacks " + std::to_string(k.shape[0]) + " layers, other keys " +
                        std::to_string(*layers));
    layers = k.shape[0];
    stacked.push_back(&k);
  }
  std::vector<MegatronParam> out;
  // A key outside the stacks: a whole parameter, or, in a model whose layers differ (dense and MoE
  // layers mixed), one layer's parameter named by its index, whose MoE expert keys stack that layer's
  // experts along their first axis.
  auto whole = [&](const ModelKey& k) {
    const std::optional<uint64_t> layer = layer_index(k.key);
    const ChunkIndex index(k);
    if (layer && is_layer_expert_key(k.key) && !k.shape.empty()) {
      for (uint64_t e = 0; e < k.shape[0]; ++e) {
        MegatronParam p{with_expert(strip_module_prefix(k.key), e), k.key, layer, e,
                        std::vector<uint64_t>(k.shape.begin() + 1, k.shape.end()), k.dtype, 0, {}};
        p.key_offset = e * numel_of(p.shape);
        p.chunks = index.inside({e});
        out.push_back(std::move(p));
      }
      return;
    }
    MegatronParam p{strip_module_prefix(k.key), k.key, layer, std::nullopt, k.shape, k.dtype, 0, {}};
    p.chunks = index.inside({});
    out.push_back(std::move(p));
  };
  for (const ModelKey* k : before) whole(*k);
  std::vector<ChunkIndex> indices;
  indices.reserve(stacked.size());
  for (const ModelKey* k : stacked) indices.emplace_back(*k);
  for (uint64_t i = 0; layers && i < *layers; ++i)
    for (size_t ki = 0; ki < stacked.size(); ++ki) {
      const ModelKey* k = stacked[ki];
      const std::string name = with_layer(strip_module_prefix(k->key), i);
      if (!is_expert_key(k->key) || k->shape.size() < 2) {
        MegatronParam p{name, k->key, i, std::nullopt, std::vector<uint64_t>(k->shape.begin() + 1, k->shape.end()),
                        k->dtype, 0, {}};
        p.key_offset = i * numel_of(p.shape);
        p.chunks = indices[ki].inside({i});
        out.push_back(std::move(p));
        continue;
      }
      for (uint64_t e = 0; e < k->shape[1]; ++e) {
        MegatronParam p{with_expert(name, e), k->key, i, e, std::vector<uint64_t>(k->shape.begin() + 2, k->shape.end()),
                        k->dtype, 0, {}};
        p.key_offset = (i * k->shape[1] + e) * numel_of(p.shape);
        p.chunks = indices[ki].inside({i, e});
        out.push_back(std::move(p));
      }
    }
  for (const ModelKey* k : after) whole(*k);
  return out;
}

model::ModelSpec megatron_spec(const std::vector<MegatronParam>& params) {
  model::ModelSpec spec;
  spec.name = "megatron";
  for (const MegatronParam& p : params) {
    model::Param sp;
    sp.name = p.name;
    sp.shape = p.shape.empty() ? std::vector<uint64_t>{1} : p.shape;
    sp.dtype = p.dtype;
    sp.role = sp.shape.size() == 2 ? model::Role::matrix : model::Role::vector;
    spec.params.push_back(std::move(sp));
  }
  return spec;
}

namespace {

// What the stored unpadded bucket sizes say, whatever the DP size: the bucket sizes they allow,
// (lo, hi], and whether any buffer has several buckets.
struct UnpaddedWalk {
  uint64_t lo = 0, hi = std::numeric_limits<uint64_t>::max();
  bool several = false;  // some bucket closed by the bucket size (not the last, not a shared embedding's)
  bool grad_fp32 = true;
};

std::optional<UnpaddedWalk> walk_unpadded(const std::vector<MegatronParam>& params,
                                          const std::vector<StoredBuffer>& stored, std::string& mismatch) {
  const bool grad_fp32 = std::all_of(stored.begin(), stored.end(), [](const StoredBuffer& b) {
    return b.grad_dtype == DType::F32;
  });

  // Which stored buffer each param belongs to, and the members of each in registration order.
  std::vector<std::vector<uint32_t>> members(stored.size());
  for (uint32_t i = 0; i < params.size(); ++i) {
    const DType grad = grad_fp32 ? DType::F32 : params[i].dtype;
    auto it = std::find_if(stored.begin(), stored.end(), [&](const StoredBuffer& b) {
      return b.param_dtype == params[i].dtype && b.grad_dtype == grad;
    });
    if (it == stored.end()) {
      mismatch = "parameter " + params[i].name + " (" + std::string(dtype_name(params[i].dtype)) +
                 ") belongs to no stored optimizer buffer " + dtype_pair(params[i].dtype, grad);
      return std::nullopt;
    }
    members[static_cast<size_t>(it - stored.begin())].push_back(i);
  }

  // Walk each buffer's params in layout order (reverse registration), cutting buckets where the stored
  // unpadded sizes say; every cut bounds the bucket size from above, every param that did not close a
  // bucket bounds it from below.
  uint64_t lo = 0, hi = std::numeric_limits<uint64_t>::max();
  bool several = false;
  for (size_t g = 0; g < stored.size(); ++g) {
    const StoredBuffer& sb = stored[g];
    const std::string where = "buffer " + std::to_string(g) + " " + dtype_pair(sb.param_dtype, sb.grad_dtype);
    if (sb.numel.size() != sb.numel_unpadded.size()) {
      mismatch = where + ": " + std::to_string(sb.numel.size()) + " per_bucket_numel entries but " +
                 std::to_string(sb.numel_unpadded.size()) + " per_bucket_numel_unpadded";
      return std::nullopt;
    }
    if (members[g].empty()) {
      mismatch = where + ": no model parameter has this buffer's dtypes";
      return std::nullopt;
    }
    size_t k = 0;
    uint64_t bucket_start = 0, cursor = 0;
    bool open = false;  // the current bucket holds a parameter
    for (auto it = members[g].rbegin(); it != members[g].rend(); ++it) {
      const MegatronParam& p = params[*it];
      uint64_t start = layout::pad_param_start(cursor);
      if (k >= sb.numel_unpadded.size()) {
        mismatch = where + ": parameter " + p.name + " lies past the last stored bucket";
        return std::nullopt;
      }
      if (p.own_bucket && open) {  // the open bucket closes where the shared embedding would start
        if (start - bucket_start != sb.numel_unpadded[k] || sb.numel[k] < sb.numel_unpadded[k]) {
          mismatch = where + " bucket " + std::to_string(k) + ": stored numel_unpadded " +
                     std::to_string(sb.numel_unpadded[k]) + ", but the recomputed layout closes it at " +
                     std::to_string(start - bucket_start) + " before the shared embedding " + p.name;
          return std::nullopt;
        }
        bucket_start += sb.numel[k];
        cursor = start = bucket_start;
        ++k;
        if (k >= sb.numel_unpadded.size()) {
          mismatch = where + ": the shared embedding " + p.name + " lies past the last stored bucket";
          return std::nullopt;
        }
      }
      const uint64_t end = start + numel_of(p.shape);
      const bool last = std::next(it) == members[g].rend();
      // Closed regardless of the bucket size: the last parameter, a shared embedding, and the one
      // before a shared embedding.
      const bool forced = last || p.own_bucket || params[*std::next(it)].own_bucket;
      const uint64_t rel = end - bucket_start;
      const uint64_t want = sb.numel_unpadded[k];
      open = true;
      if (!p.own_bucket && !last && params[*std::next(it)].own_bucket) {
        if (rel > want) {
          mismatch = where + " bucket " + std::to_string(k) + ": stored numel_unpadded " + std::to_string(want) +
                     ", but the recomputed layout puts parameter " + p.name + " across it";
          return std::nullopt;
        }
        lo = std::max(lo, rel);
        cursor = end;
        continue;
      }
      if (rel < want && !forced) {
        lo = std::max(lo, rel);
        cursor = end;
        continue;
      }
      if (rel != want) {
        mismatch = where + " bucket " + std::to_string(k) + ": stored numel_unpadded " + std::to_string(want) +
                   ", but the recomputed layout " + (rel > want ? "puts parameter " + p.name + " across it at [" +
                                                                      std::to_string(start - bucket_start) + ", " +
                                                                      std::to_string(rel) + ")"
                                                                : "ends the buffer at " + std::to_string(rel));
        return std::nullopt;
      }
      if (!forced) {
        hi = std::min(hi, rel);
        several = true;
      }
      if (sb.numel[k] < want) {
        mismatch = where + " bucket " + std::to_string(k) + ": per_bucket_numel " + std::to_string(sb.numel[k]) +
                   " is smaller than numel_unpadded " + std::to_string(want);
        return std::nullopt;
      }
      bucket_start += sb.numel[k];
      cursor = bucket_start;
      open = false;
      ++k;
    }
    if (k != sb.numel_unpadded.size()) {
      mismatch = where + ": " + std::to_string(sb.numel_unpadded.size()) + " stored buckets, the parameters fill " +
                 std::to_string(k);
      return std::nullopt;
    }
  }
  return UnpaddedWalk{lo, hi, several, grad_fp32};
}

}  // namespace

bool matches_unpadded(const std::vector<MegatronParam>& params, const std::vector<StoredBuffer>& stored,
                      std::string& mismatch) {
  return walk_unpadded(params, stored, mismatch).has_value();
}

std::optional<RecoveredLayout> recover_layout(const std::vector<MegatronParam>& params,
                                              const std::vector<StoredBuffer>& stored, uint32_t dp,
                                              std::string& mismatch) {
  if (dp == 0) throw UsageError("layout: dp must be at least 1");
  RecoveredLayout r;
  r.spec = megatron_spec(params);
  const std::optional<UnpaddedWalk> w = walk_unpadded(params, stored, mismatch);
  if (!w) return std::nullopt;
  const uint64_t lo = w->lo, hi = w->hi;
  const bool several = w->several, grad_fp32 = w->grad_fp32;
  if (lo >= hi) {
    mismatch = "no bucket size yields the stored buckets (a bucket closes at " + std::to_string(hi) +
               " elements, another stays open at " + std::to_string(lo) + ")";
    return std::nullopt;
  }

  // Bucket-end padding: lcm(dp, 128), or lcm(dp, 128, 2^16) for high NCCL bus bandwidth.
  std::optional<bool> pad_for_nccl;
  for (bool pad : {false, true}) {
    const uint64_t d = layout::bucket_end_divisor(dp, pad);
    bool fits = true;
    for (const StoredBuffer& sb : stored)
      for (size_t k = 0; k < sb.numel.size(); ++k) fits = fits && layout::round_up(sb.numel_unpadded[k], d) == sb.numel[k];
    if (fits) {
      pad_for_nccl = pad;
      break;
    }
  }
  if (!pad_for_nccl) {
    mismatch = "the stored padded bucket sizes are multiples of neither lcm(dp, 128) = " +
               std::to_string(layout::bucket_end_divisor(dp, false)) + " nor lcm(dp, 128, 65536) = " +
               std::to_string(layout::bucket_end_divisor(dp, true)) + " at dp " + std::to_string(dp);
    return std::nullopt;
  }

  layout::BucketedOptions opts;
  opts.dp = dp;
  opts.pad_for_nccl = *pad_for_nccl;
  opts.grad_reduce_in_fp32 = grad_fp32;
  if (std::any_of(params.begin(), params.end(), [](const MegatronParam& p) { return p.own_bucket; }))
    for (const MegatronParam& p : params) opts.own_bucket.push_back(p.own_bucket);
  if (several) {
    r.bucket_size_lo = lo;
    if (hi != std::numeric_limits<uint64_t>::max()) r.bucket_size_hi = hi;
    opts.bucket_size = lo + 1;
  }
  r.layout = layout::build_bucketed_layout(r.spec, opts);

  // The engine's buffers must be the stored ones, bucket for bucket.
  for (const layout::Buffer& buf : r.layout.buffers) {
    auto it = std::find_if(stored.begin(), stored.end(), [&](const StoredBuffer& b) {
      return b.param_dtype == buf.key.param_dtype && b.grad_dtype == buf.key.grad_dtype;
    });
    const size_t g = static_cast<size_t>(it - stored.begin());
    bool same = it != stored.end() && buf.buckets.size() == it->numel.size();
    for (size_t k = 0; same && k < buf.buckets.size(); ++k)
      same = buf.buckets[k].numel() == it->numel[k] && buf.buckets[k].numel_unpadded == it->numel_unpadded[k];
    if (!same) {
      mismatch = "the recomputed buffer " + layout::to_string(buf.key) + " does not reproduce the stored bucket sizes";
      return std::nullopt;
    }
    r.gbuf.push_back(static_cast<uint32_t>(g));
  }
  return r;
}

}  // namespace fpg::dcp
