#include "formats/dcp/dcp_params.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "ckpt/index.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/shape.h"
#include "formats/dcp/megatron/megatron_keys.h"
#include "formats/dcp/metadata/box_coverage.h"

namespace fpg::dcp {

std::string_view optimizer_form_name(OptimizerForm f) {
  switch (f) {
    case OptimizerForm::none: return "none";
    case OptimizerForm::dp_reshardable: return "dp_reshardable";
    case OptimizerForm::model_space: return "model space";
  }
  return "?";
}

std::string to_string(const ShapeMismatch& m) {
  return "key " + quoted_name(m.state_key) + " has shape " + shape_string(m.state_shape) + ", its parameter " +
         quoted_name(m.param) + " (key " + quoted_name(m.param_key) + ") has shape " + shape_string(m.param_shape);
}

namespace {

const std::regex kPlainState(R"(^(?:optim|optimizer)\.state\.(.+)\.(\w+)$)");
uint64_t volume(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

DType dtype_of(const Entry& e, const std::string& file) {
  if (!e.tensor.dtype->dtype)
    throw FormatError(file + ": key " + quoted_name(e.fqn) + " has dtype torch." + std::string(e.tensor.dtype->name) +
                      ", which fpgather cannot represent");
  return *e.tensor.dtype->dtype;
}

std::string master_or(const std::string& state) {
  return state == "param" || state == "fp32_param" ? "master" : state;
}

// A ShardedObject read back is the list of objects saved under its key; unwrap one level.
const Value& sharded_object(const Value& v) {
  if (v.is(Value::Kind::list) && v.items().size() == 1) return v.items()[0];
  return v;
}

DType torch_name_dtype(const std::string& name, const std::string& where) {
  const TorchDType* t = find_torch_dtype(name.rfind("torch.", 0) == 0 ? name.substr(6) : name);
  if (!t || !t->dtype) throw FormatError(where + ": unknown dtype " + name);
  return *t->dtype;
}

// per_bucket_numel(_unpadded) of one dp group: a list over buffers of {(param dtype, grad dtype): [sizes]}.
std::vector<std::pair<std::pair<DType, DType>, std::vector<uint64_t>>> bucket_sizes(const Value& v,
                                                                                    const std::string& where) {
  const Value& list = sharded_object(v);
  if (!list.is(Value::Kind::list)) throw FormatError(where + ": expected a list of buffers, found " + list.repr(80));
  std::vector<std::pair<std::pair<DType, DType>, std::vector<uint64_t>>> out;
  for (const Value& buf : list.items()) {
    if (!buf.is(Value::Kind::dict) || buf.entries().size() != 1)
      throw FormatError(where + ": expected {(param dtype, grad dtype): [sizes]}, found " + buf.repr(80));
    const auto& [key, sizes] = buf.entries()[0];
    if (!key.is(Value::Kind::tuple) || key.items().size() != 2 || !key.items()[0].is(Value::Kind::global) ||
        !key.items()[1].is(Value::Kind::global) || !sizes.is(Value::Kind::list))
      throw FormatError(where + ": expected {(param dtype, grad dtype): [sizes]}, found " + buf.repr(80));
    std::vector<uint64_t> n;
    for (const Value& s : sizes.items()) {
      if (!s.is(Value::Kind::integer) || s.as_int() < 0) throw FormatError(where + ": bucket size " + s.repr(40));
      n.push_back(static_cast<uint64_t>(s.as_int()));
    }
    out.push_back({{torch_name_dtype(key.items()[0].name(), where), torch_name_dtype(key.items()[1].name(), where)}, n});
  }
  return out;
}

}  // namespace

DcpParams::DcpParams(const Reader& reader) : r_(reader) {
  megatron_ = r_.megatron() && r_.megatron()->sharded_backend == "torch_dist";
  uint32_t ranks = 0;
  for (const StorageEntry& s : r_.metadata().storage) {
    std::optional<uint64_t> rank;
    try {
      rank = storage_file_rank(s.relative_path);
    } catch (const FormatError& e) {
      throw FormatError(r_.dir() + ": " + e.what());
    }
    storage_rank_.push_back(rank);
    if (rank) ranks = std::max<uint32_t>(ranks, static_cast<uint32_t>(*rank) + 1);
  }
  dp_ = std::max<uint32_t>(ranks, 1);
  if (megatron_) map_megatron();
  else map_plain();
}

std::string DcpParams::describe() const {
  return (megatron_ ? "Megatron torch_dist checkpoint " : "PyTorch DCP checkpoint ") + r_.dir();
}

void DcpParams::add(const std::string& param, const std::string& role, size_t entry, uint64_t base,
                    const std::vector<uint64_t>& shape) {
  const Entry& e = r_.metadata().entries[entry];
  tensors_.push_back({role == "weight" ? param : param + "." + role, param, role, dtype_of(e, r_.metadata().file), shape});
  sources_.push_back({entry, base});
}

void DcpParams::map_megatron() {
  const Metadata& md = r_.metadata();
  std::vector<ModelKey> model_keys;
  std::map<std::string, size_t> entry_of;
  std::vector<size_t> bucket_entries, state_entries;
  for (size_t i = 0; i < md.entries.size(); ++i) {
    const Entry& e = md.entries[i];
    if (!e.is_tensor) continue;
    entry_of[e.fqn] = i;
    if (parse_bucket_key(e.fqn)) bucket_entries.push_back(i);
    else if (parse_model_space_state_key(e.fqn)) state_entries.push_back(i);
    else if (e.fqn.find("optimizer.") != std::string::npos) unmapped_.push_back(e.fqn);
    else model_keys.push_back({e.fqn, dtype_of(e, md.file), e.tensor.size});
  }
  params_ = fpg::dcp::megatron_params(model_keys);
  const std::vector<MegatronParam>& params = params_;

  // Per parameter, its tensors in order: weight, master, states.
  std::map<std::string, std::vector<std::pair<std::string, size_t>>> states_of_key;  // model key -> (state, entry)
  for (size_t i : state_entries) {
    const ModelSpaceStateKey k = *parse_model_space_state_key(md.entries[i].fqn);
    states_of_key[k.model_key].push_back({master_or(k.state), i});
  }
  if (!state_entries.empty()) {
    form_ = OptimizerForm::model_space;
    optimizer_prefix_ = kModelSpacePrefix;
  }
  for (const MegatronParam& p : params) {
    const uint64_t n = volume(p.shape);
    const uint64_t base = p.layer ? *p.layer * n : 0;
    add(p.name, "weight", entry_of.at(p.key), base, p.shape);
    auto it = states_of_key.find(p.key);
    if (it == states_of_key.end()) continue;
    std::stable_sort(it->second.begin(), it->second.end(),
                     [](const auto& a, const auto& b) { return a.first == "master" && b.first != "master"; });
    for (const auto& [state, entry] : it->second) {
      const Entry& model = md.entries[entry_of.at(p.key)];
      if (md.entries[entry].tensor.size != model.tensor.size && md.entries[entry].tensor.size.empty()) {
        unmapped_.push_back(md.entries[entry].fqn);  // a per-parameter scalar, as in map_plain
        continue;
      }
      if (md.entries[entry].tensor.size != model.tensor.size) {
        // A stacked model key is read per layer: its states are too, so one mismatch is recorded once.
        if (mismatches_.empty() || mismatches_.back().state_key != md.entries[entry].fqn)
          mismatches_.push_back({md.entries[entry].fqn, md.entries[entry].tensor.size, p.name, p.key, model.tensor.size});
        continue;
      }
      add(p.name, state, entry, base, p.shape);
    }
  }
  for (const auto& [key, states] : states_of_key)
    if (!entry_of.count(key))
      for (const auto& s : states) unmapped_.push_back(md.entries[s.second].fqn);
  if (!bucket_entries.empty()) map_buckets(params, bucket_entries);
}

void DcpParams::map_buckets(const std::vector<MegatronParam>& params, const std::vector<size_t>& bucket_entries) {
  const Metadata& md = r_.metadata();
  form_ = OptimizerForm::dp_reshardable;
  struct StoredKey {
    uint32_t gbuf = 0, bucket = 0;
    std::string state;
    size_t entry = 0;
  };
  std::vector<StoredKey> keys;
  std::string group;
  std::vector<std::string> states;
  for (size_t i : bucket_entries) {
    const BucketKey k = *parse_bucket_key(md.entries[i].fqn);
    if (!group.empty() && group != k.group)
      throw FormatError(md.file + ": bucket keys of two optimizer groups (" + quoted_name(group) + ", '" + k.group +
                        "'); fpgather reads checkpoints of one model-parallel rank (TP = PP = 1)");
    group = k.group;
    optimizer_prefix_ = group;
    if (std::find(states.begin(), states.end(), k.state) == states.end()) states.push_back(k.state);
    keys.push_back({k.gbuf, k.bucket, k.state, i});
  }

  // The stored bucket sizes, per buffer.
  auto object = [&](const std::string& name) -> Value {
    for (const Entry& e : md.entries)
      if (!e.is_tensor && is_group_object(e.fqn, group, name)) return r_.read_object(e);
    throw FormatError(r_.dir() + ": dp_reshardable optimizer state without its '" + group + "." + name + "' object");
  };
  const auto padded = bucket_sizes(object(kPerBucketNumel), r_.dir() + ": " + group + "." + kPerBucketNumel);
  const auto unpadded =
      bucket_sizes(object(kPerBucketNumelUnpadded), r_.dir() + ": " + group + "." + kPerBucketNumelUnpadded);
  if (padded.size() != unpadded.size())
    throw Error(ExitCode::check_failed, r_.dir() + ": per_bucket_numel lists " + std::to_string(padded.size()) +
                                            " buffers, per_bucket_numel_unpadded " + std::to_string(unpadded.size()));
  std::vector<StoredBuffer> stored;
  for (size_t g = 0; g < padded.size(); ++g)
    stored.push_back({padded[g].first.first, padded[g].first.second, padded[g].second, unpadded[g].second});

  // The DP size. The rank files alone do not tell it: a rank whose shards are all tail padding
  // stores nothing (as Megatron's fix for padding-only ranks does), and a fully parallel save may
  // store a shard in another rank's file. The chunk offsets do, whatever file holds them: at DP d a
  // bucket is cut into shards of L = padded / d, every chunk lies inside one shard, and every shard
  // that holds part of [0, numel_unpadded) begins with a chunk (a fragment or a gap). Candidates: the
  // rank-file count, and d = padded / (start / r) for each rank file r > 0 and the first chunk it
  // stores of each bucket. The largest candidate the offsets fit, with a bucket spanning more than
  // one shard, whose layout the model keys confirm, is taken.
  const uint32_t ranks_stored = dp_;
  struct KeyChunks {
    uint64_t padded = 0, unpadded = 0;
    std::vector<std::pair<uint64_t, uint64_t>> chunks;  // [lo, hi), sorted
  };
  std::vector<KeyChunks> key_chunks;
  std::set<uint64_t> candidates{ranks_stored};
  for (const StoredKey& k : keys) {
    if (k.gbuf >= stored.size() || k.bucket >= stored[k.gbuf].numel.size()) continue;
    const Entry& e = md.entries[k.entry];
    KeyChunks kc;
    kc.padded = stored[k.gbuf].numel[k.bucket];
    kc.unpadded = stored[k.gbuf].numel_unpadded[k.bucket];
    std::map<uint64_t, uint64_t> first;  // rank file -> the lowest offset it stores of this key
    for (const ChunkMeta& ch : e.tensor.chunks) {
      if (ch.offsets.size() != 1 || ch.sizes.size() != 1 || ch.sizes[0] > UINT64_MAX - ch.offsets[0]) continue;
      kc.chunks.emplace_back(ch.offsets[0], ch.offsets[0] + ch.sizes[0]);
      if (ch.storage == kNoStorage) continue;  // validate reports it
      const std::optional<uint64_t>& rank = storage_rank_[static_cast<size_t>(ch.storage)];
      if (!rank || *rank == 0) continue;
      auto [it, added] = first.emplace(*rank, ch.offsets[0]);
      if (!added) it->second = std::min(it->second, ch.offsets[0]);
    }
    for (const auto& [rank, start] : first) {
      const uint64_t shard = start / rank;
      if (start % rank == 0 && shard > 0 && kc.padded % shard == 0 && kc.padded / shard <= ckpt::kMaxRanks)
        candidates.insert(kc.padded / shard);
    }
    std::sort(kc.chunks.begin(), kc.chunks.end());
    key_chunks.push_back(std::move(kc));
  }
  // Whether the offsets fit DP d, and whether some bucket then spans more than its first shard.
  auto fits = [&](uint64_t d, bool& spans) {
    spans = false;
    for (const KeyChunks& kc : key_chunks) {
      if (d == 0 || kc.padded % d != 0 || kc.padded / d == 0) return false;
      const uint64_t shard = kc.padded / d;
      for (const auto& [lo, hi] : kc.chunks)
        if (hi > lo && lo / shard != (hi - 1) / shard) return false;
      if (kc.unpadded <= shard) continue;
      spans = true;
      const uint64_t starts = (kc.unpadded - 1) / shard;  // shards 1 .. starts begin inside the extent
      if (starts > kc.chunks.size()) return false;
      for (uint64_t m = 1; m <= starts; ++m) {
        const auto it = std::lower_bound(kc.chunks.begin(), kc.chunks.end(), std::make_pair(m * shard, uint64_t{0}));
        if (it == kc.chunks.end() || it->first != m * shard) return false;
      }
    }
    return true;
  };
  bool spanning = false;  // the DP was taken from shards that hold data
  size_t tried = 0;       // a hostile file may name many candidates: a few are tried
  for (auto it = candidates.rbegin(); it != candidates.rend() && tried < 64; ++it) {
    bool spans = false;
    if (*it == 0 || *it > ckpt::kMaxRanks || !fits(*it, spans) || !spans) continue;
    ++tried;
    std::string ignored;
    layout_ = recover_layout(params, stored, static_cast<uint32_t>(*it), ignored);
    if (layout_) {
      dp_ = static_cast<uint32_t>(*it);
      spanning = true;
      break;
    }
  }
  std::string mismatch;
  if (!layout_) layout_ = recover_layout(params, stored, dp_, mismatch);
  // When only the first ranks store anything (every bucket smaller than a shard), nothing on disk
  // tells the DP size apart from its multiples: the smallest one the buckets' padding allows is
  // taken, whose layout reads every parameter where any of them would.
  if (!layout_ && !stored.empty() && !stored[0].numel.empty()) {
    const uint64_t padded = stored[0].numel[0];
    tried = 0;
    for (uint64_t d = uint64_t{dp_} + 1; d <= std::min<uint64_t>(padded, ckpt::kMaxRanks) && tried < 64; ++d) {
      if (padded % d != 0) continue;
      ++tried;
      std::string ignored;
      layout_ = recover_layout(params, stored, static_cast<uint32_t>(d), ignored);
      if (layout_) {
        dp_ = static_cast<uint32_t>(d);
        dp_is_smallest_ = true;
        break;
      }
    }
  }
  // Not taken from shards that hold data: twice the DP may read alike too, when every bucket lies in
  // the shards of the ranks that have files at that DP as well.
  if (layout_ && !dp_is_smallest_ && !spanning && uint64_t{dp_} * 2 <= ckpt::kMaxRanks) {
    std::string ignored;
    const std::optional<RecoveredLayout> twice = recover_layout(params, stored, dp_ * 2, ignored);
    bool alike = twice.has_value();
    if (twice)
      for (const layout::Buffer& buf : twice->layout.buffers)
        for (const layout::Bucket& bucket : buf.buckets)
          alike = alike && bucket.numel_unpadded <= bucket.shard_numel * std::max<uint32_t>(ranks_stored, 1);
    dp_is_smallest_ = alike;
  }
  if (!layout_)
    throw Error(ExitCode::check_failed,
                r_.dir() + ": the dp_reshardable optimizer state does not match Megatron's buffer layout "
                           "recomputed from the model keys: " + mismatch);

  auto entry_for = [&](uint32_t gbuf, uint32_t bucket, const std::string& state) -> const StoredKey* {
    for (const StoredKey& k : keys)
      if (k.gbuf == gbuf && k.bucket == bucket && k.state == state) return &k;
    return nullptr;
  };
  // Per parameter (registration order): its slot in the layout.
  std::vector<std::pair<uint32_t, uint32_t>> where(params.size(), {UINT32_MAX, 0});
  for (uint32_t b = 0; b < layout_->layout.buffers.size(); ++b)
    for (uint32_t s = 0; s < layout_->layout.buffers[b].params.size(); ++s)
      where[layout_->layout.buffers[b].params[s].param] = {b, s};

  // Insert each parameter's states after its weight, keeping registration order.
  std::vector<ckpt::ParamTensor> tensors;
  std::vector<Source> sources;
  size_t t = 0;
  for (uint32_t p = 0; p < params.size(); ++p) {
    while (t < tensors_.size() && tensors_[t].param == params[p].name) {
      tensors.push_back(tensors_[t]);
      sources.push_back(sources_[t++]);
    }
    const auto [b, s] = where[p];
    if (b == UINT32_MAX) continue;
    const layout::Buffer& buf = layout_->layout.buffers[b];
    const layout::ParamSlot& slot = buf.params[s];
    const layout::Bucket& bucket = buf.buckets[slot.bucket];
    std::vector<std::string> ordered = states;
    std::stable_partition(ordered.begin(), ordered.end(), [](const std::string& x) { return x == "param"; });
    for (const std::string& state : ordered) {
      const StoredKey* k = entry_for(layout_->gbuf[b], slot.bucket, state);
      if (!k)
        throw FormatError(r_.dir() + ": no key for state " + quoted_name(state) + " of buffer " + std::to_string(layout_->gbuf[b]) +
                          " bucket " + std::to_string(slot.bucket) + ", which holds " + params[p].name);
      const Entry& e = md.entries[k->entry];
      if (e.tensor.size != std::vector<uint64_t>{bucket.numel_unpadded})
        throw Error(ExitCode::check_failed, r_.dir() + ": key " + quoted_name(e.fqn) + " has " + std::to_string(volume(e.tensor.size)) +
                                                " elements, the bucket's numel_unpadded is " +
                                                std::to_string(bucket.numel_unpadded));
      tensors.push_back({params[p].name + "." + master_or(state), params[p].name, master_or(state),
                         dtype_of(e, md.file), params[p].shape});
      sources.push_back({k->entry, slot.world.begin - bucket.world.begin});
    }
  }
  tensors_ = std::move(tensors);
  sources_ = std::move(sources);

  // Stored chunks that the layout says are padding (Megatron stores the gaps to pass DCP's cover check).
  for (const StoredKey& k : keys) {
    const layout::Buffer* buf = nullptr;
    for (size_t b = 0; b < layout_->gbuf.size(); ++b)
      if (layout_->gbuf[b] == k.gbuf) buf = &layout_->layout.buffers[b];
    if (!buf || k.bucket >= buf->buckets.size()) {
      unmapped_.push_back(md.entries[k.entry].fqn);
      continue;
    }
    const layout::Bucket& bucket = buf->buckets[k.bucket];
    for (const ChunkMeta& c : md.entries[k.entry].tensor.chunks) {
      if (c.offsets.size() != 1 || c.sizes.size() != 1) continue;  // validate reports the arity
      const uint64_t lo = c.offsets[0], hi = lo + c.sizes[0];
      const bool padding = std::any_of(bucket.padding.begin(), bucket.padding.end(),
                                       [&](const layout::Range& r) { return r.begin <= lo && hi <= r.end; });
      if (padding && hi > lo) stored_padding_.push_back({md.entries[k.entry].fqn, lo, hi});
    }
  }
}

void DcpParams::map_plain() {
  const Metadata& md = r_.metadata();
  auto strip = [](std::string s) { return s.rfind("model.", 0) == 0 ? s.substr(6) : s; };
  std::map<std::string, size_t> weight_of;
  std::vector<std::tuple<std::string, std::string, size_t>> states;  // param, state, entry
  for (size_t i = 0; i < md.entries.size(); ++i) {
    const Entry& e = md.entries[i];
    if (!e.is_tensor) continue;
    std::smatch m;
    if (std::regex_match(e.fqn, m, kPlainState)) states.emplace_back(strip(m[1]), m[2], i);
    else weight_of.emplace(strip(e.fqn), i);
  }
  if (!states.empty()) form_ = OptimizerForm::model_space;
  for (size_t i = 0; i < md.entries.size(); ++i) {
    const Entry& e = md.entries[i];
    if (!e.is_tensor || std::regex_match(e.fqn, kPlainState)) continue;
    const std::string name = strip(e.fqn);
    add(name, "weight", i, 0, e.tensor.size);
    for (const auto& [param, state, entry] : states)
      if (param == name && md.entries[entry].tensor.size == e.tensor.size) add(name, state, entry, 0, e.tensor.size);
  }
  for (const auto& [param, state, entry] : states) {
    auto w = weight_of.find(param);
    // A 0-d state is a per-parameter scalar (torch's Adam keeps its step so), not an elementwise
    // state of another shape: no parameter tensor reads it, as none reads a key naming no parameter.
    if (w == weight_of.end() || md.entries[entry].tensor.size.empty())
      unmapped_.push_back(md.entries[entry].fqn);
    else if (md.entries[entry].tensor.size != md.entries[w->second].tensor.size)
      mismatches_.push_back({md.entries[entry].fqn, md.entries[entry].tensor.size, param, md.entries[w->second].fqn,
                             md.entries[w->second].tensor.size});
  }
}

void DcpParams::prefetch(size_t t, size_t entry, const std::vector<size_t>& now, size_t chunk) const {
  // Past the chunks being read, at least two export slabs (64 MiB each) stay asked for: the disk
  // keeps a deep queue while the reader copies, checksums and writes.
  constexpr uint64_t kWindow = uint64_t{128} << 20;
  constexpr size_t kMaxChunks = 256;
  const Metadata& md = r_.metadata();
  const Position start{t, now.empty() ? chunk : now.front()};
  if (last_read_ && start < *last_read_) asked_.reset();
  last_read_ = start;
  std::vector<std::pair<size_t, size_t>> ask;  // (entry, chunk)
  // Small chunks are not asked for (Reader::prefetch would skip them): no helper thread for them.
  constexpr uint64_t kLarge = uint64_t{1} << 20;
  auto want = [&](size_t tt, size_t e, size_t c) {
    const Position p{tt, c};
    if (asked_ && !(*asked_ < p)) return;
    asked_ = p;
    if (r_.chunk_bytes(md.entries[e], c) >= kLarge) ask.emplace_back(e, c);
  };
  for (size_t c : now) want(t, entry, c);
  uint64_t window = 0;
  for (size_t n = 0; n < kMaxChunks && window < kWindow; ++n) {
    while (++chunk >= md.entries[entry].tensor.chunks.size()) {
      // The key's chunks are done: go on with the next tensor's key.
      while (++t < sources_.size() && sources_[t].entry == entry) {
      }
      if (t >= sources_.size()) break;
      entry = sources_[t].entry;
      chunk = SIZE_MAX;  // wraps to chunk 0
    }
    if (t >= sources_.size()) break;
    window += r_.chunk_bytes(md.entries[entry], chunk);
    want(t, entry, chunk);
  }
  if (ask.empty()) return;
  // Finished askers go; a few may still wait on the disk's queue, more than that wait here.
  constexpr size_t kMaxAsking = 4;
  asking_.erase(std::remove_if(asking_.begin(), asking_.end(),
                               [](std::future<void>& f) {
                                 return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
                               }),
                asking_.end());
  if (asking_.size() >= kMaxAsking) {
    asking_.front().get();
    asking_.erase(asking_.begin());
  }
  asking_.push_back(std::async(std::launch::async, [this, ask = std::move(ask)] {
    const Metadata& m = r_.metadata();
    for (const auto& [e, c] : ask) r_.prefetch(m.entries[e], c);
  }));
}

void DcpParams::read(size_t t, uint64_t lo, uint64_t hi, void* out) const {
  const Source& s = sources_.at(t);
  const Entry& e = r_.metadata().entries[s.entry];
  const std::vector<uint64_t>& size = e.tensor.size;
  const uint64_t elem = e.tensor.dtype->element_bytes;
  const uint64_t A = s.base + lo, B = s.base + hi;
  const size_t n = size.size();
  std::vector<uint64_t> stride(n, 1);
  for (size_t d = n; d-- > 1;) stride[d - 1] = stride[d] * size[d];
  auto* dst = static_cast<uint8_t*>(out);
  uint64_t copied = 0;
  // Chunks that are one run of the key and wanted whole are read straight into `out`, several at
  // once; the others pass through the cached chunk. Only the cache and the asking ahead are shared
  // between reads, so reads of distinct ranges run at once (concurrent_reads).
  struct Whole {
    size_t chunk;
    uint64_t at, n;  // elements: where in `out`, how many
  };
  std::vector<Whole> whole;
  std::vector<size_t> partial;
  size_t last_chunk = SIZE_MAX;
  for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
    const ChunkMeta& ch = e.tensor.chunks[c];
    if (ch.offsets.size() != n || ch.sizes.size() != n) continue;  // validate reports the arity
    uint64_t first = 0, last = 0;
    bool empty = false;
    for (size_t d = 0; d < n; ++d) {
      empty = empty || ch.sizes[d] == 0;
      first += ch.offsets[d] * stride[d];
      last += (ch.offsets[d] + (ch.sizes[d] ? ch.sizes[d] - 1 : 0)) * stride[d];
    }
    if (empty || first >= B || last + 1 <= A) continue;
    last_chunk = c;
    if (A <= first && last < B && is_row_major_run(size, ch.offsets.data(), ch.sizes.data())) {
      whole.push_back({c, first - A, last + 1 - first});
      copied += last + 1 - first;
    } else {
      partial.push_back(c);
    }
  }
  if (last_chunk != SIZE_MAX) {
    std::vector<size_t> now;
    now.reserve(whole.size());
    for (const Whole& w : whole) now.push_back(w.chunk);
    std::lock_guard<std::mutex> lock(ask_mu_);
    prefetch(t, s.entry, now, last_chunk);
  }
  // Reads of whole chunks wait on the disk more than they compute: up to kReaders at once, whatever
  // the thread pool's size, keep it busy (on the H200 host's virtio disk 16 read a cold 2 GB export
  // 5% faster than 8; more read-ahead, 256 MiB, was slower).
  constexpr size_t kReaders = 16;
  const size_t readers = std::min(kReaders, whole.size());
  std::vector<std::future<void>> reading;
  for (size_t k = 1; k < readers; ++k)
    reading.push_back(std::async(std::launch::async, [&, k] {
      for (size_t i = k; i < whole.size(); i += readers)
        r_.read_chunk(e, whole[i].chunk, dst + whole[i].at * elem, whole[i].n * elem);
    }));
  if (!partial.empty()) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    for (size_t c : partial) {
      const ChunkMeta& ch = e.tensor.chunks[c];
      if (cache_.entry != s.entry || cache_.chunk != c) {
        cache_.entry = SIZE_MAX;
        cache_.bytes.resize(r_.chunk_bytes(e, c));
        r_.read_chunk(e, c, cache_.bytes.data(), cache_.bytes.size());
        cache_.entry = s.entry;
        cache_.chunk = c;
      }
      // Walk the chunk's rows (runs along the last axis), copying what falls inside [A, B).
      const uint64_t run = n ? ch.sizes[n - 1] : 1;
      const uint64_t rows = run ? volume(ch.sizes) / run : 0;
      std::vector<uint64_t> idx(n ? n - 1 : 0, 0);
      for (uint64_t row = 0; row < rows; ++row) {
        uint64_t g = n ? ch.offsets[n - 1] : 0;
        for (size_t d = 0; d + 1 < n; ++d) g += (ch.offsets[d] + idx[d]) * stride[d];
        const uint64_t a = std::max(g, A), b = std::min(g + run, B);
        if (a < b) {
          std::memcpy(dst + (a - A) * elem, cache_.bytes.data() + (row * run + (a - g)) * elem, (b - a) * elem);
          copied += b - a;
        }
        for (size_t d = idx.size(); d-- > 0;) {
          if (++idx[d] < ch.sizes[d]) break;
          idx[d] = 0;
        }
      }
    }
  }
  for (size_t i = 0; i < whole.size(); i += std::max<size_t>(readers, 1))
    r_.read_chunk(e, whole[i].chunk, dst + whole[i].at * elem, whole[i].n * elem);
  for (auto& f : reading) f.get();
  if (copied < B - A)
    throw FormatError(r_.dir() + ": key " + quoted_name(e.fqn) + " elements [" + std::to_string(A) + ", " + std::to_string(B) +
                      ") are not all stored (" + std::to_string(B - A - copied) + " missing)");
}

}  // namespace fpg::dcp

namespace fpg::dcp {

void require_no_shape_mismatch(const DcpParams& params, const std::string& refusing) {
  const std::vector<ShapeMismatch>& ms = params.shape_mismatches();
  if (ms.empty()) return;
  std::string msg = params.describe() + ": " + std::to_string(ms.size()) + " optimizer state" +
                    (ms.size() == 1 ? " does" : "s do") + " not have the shape of the parameter " +
                    (ms.size() == 1 ? "it names" : "they name") + "; refusing to " + refusing + ":";
  for (const ShapeMismatch& m : ms) msg += "\n  " + to_string(m);
  throw Error(ExitCode::check_failed, msg);
}

std::vector<ckpt::Problem> check_param_mapping(const Reader& reader, std::unique_ptr<DcpParams>* view) {
  try {
    auto params = std::make_unique<DcpParams>(reader);
    std::vector<ckpt::Problem> out;
    for (const ShapeMismatch& m : params->shape_mismatches())
      out.push_back({ckpt::ProblemKind::shape, m.state_key, 0, 0, "",
                     "shape " + shape_string(m.state_shape) + " is not the shape " + shape_string(m.param_shape) +
                         " of its parameter " + quoted_name(m.param) + " (key " + quoted_name(m.param_key) +
                         "): the state cannot be read as the parameter's"});
    if (view) *view = std::move(params);
    return out;
  } catch (const Error& e) {
    ckpt::Problem p;
    p.kind = e.code() == ExitCode::check_failed ? ckpt::ProblemKind::layout_mismatch : ckpt::ProblemKind::checksum;
    p.message = e.what();
    return {p};
  }
}

ValidationReport validate_with_params(const Reader& reader, const ValidateOptions& options,
                                      std::unique_ptr<DcpParams>* view) {
  ValidationReport rep = validate(reader, options);
  if (rep.ok())
    for (auto& p : check_param_mapping(reader, view)) rep.problems.push_back(std::move(p));
  return rep;
}

}  // namespace fpg::dcp
