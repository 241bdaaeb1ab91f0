#include "formats/dcp/dcp_params.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <optional>
#include <set>

#include "ckpt/index.h"
#include "core/byte_buffer.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/shape.h"
#include "formats/dcp/megatron/megatron_common_state.h"
#include "formats/dcp/megatron/megatron_keys.h"
#include "formats/dcp/metadata/box_coverage.h"
#include "formats/dcp/name_scanner.h"

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

// "optim.state.PARAM.STATE" / "optimizer.state.PARAM.STATE" (PARAM any non-empty name, STATE a word):
// (param, state), or nothing.
std::optional<std::pair<std::string, std::string>> parse_plain_state(const std::string& fqn) {
  NameScanner sc(fqn);
  if (!sc.literal("optimizer.state.") && !sc.literal("optim.state.")) return std::nullopt;
  const std::string_view rest = sc.rest();
  const size_t dot = rest.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == rest.size()) return std::nullopt;
  const std::string_view param = rest.substr(0, dot), state = rest.substr(dot + 1);
  for (char c : state)
    if (!NameScanner::is_word(c)) return std::nullopt;
  if (!NameScanner::no_line_breaks(param)) return std::nullopt;
  return std::make_pair(std::string(param), std::string(state));
}
// Megatron's mapping reads every model and optimizer key as values: a key of a dtype fpgather has
// no counterpart of is a form it does not read (the summary says so; validation notes it), not a
// defect of the checkpoint. A plain DCP maps such a key alone (add_plain).
DType dtype_of(const Entry& e, const std::string& file) {
  if (!e.tensor.dtype->dtype)
    throw UnsupportedError(file + ": key " + quoted_name(e.fqn) + " has dtype torch." + std::string(e.tensor.dtype->name) +
                      ", which fpgather cannot represent");
  return *e.tensor.dtype->dtype;
}

// Row-major strides of a key of shape `size`, in elements.
std::vector<uint64_t> key_strides(const std::vector<uint64_t>& size) {
  std::vector<uint64_t> stride(size.size(), 1);
  for (size_t d = size.size(); d-- > 1;) stride[d - 1] = stride[d] * size[d];
  return stride;
}

// A chunk's first and last element in its key's flat extent (`stride`: key_strides of the key);
// false for a chunk of another arity (validate reports it) or of no elements.
bool chunk_extent(const ChunkMeta& ch, const std::vector<uint64_t>& stride, uint64_t& first, uint64_t& last) {
  const size_t n = stride.size();
  if (ch.offsets.size() != n || ch.sizes.size() != n) return false;
  first = last = 0;
  for (size_t d = 0; d < n; ++d) {
    if (ch.sizes[d] == 0) return false;
    first += ch.offsets[d] * stride[d];
    last += (ch.offsets[d] + ch.sizes[d] - 1) * stride[d];
  }
  return true;
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
  const std::string* last = nullptr;  // consecutive entries mostly name one file: parsed once per run
  std::optional<uint64_t> rank;
  for (const StorageEntry& s : r_.metadata().storage) {
    if (!last || *last != s.relative_path) {
      try {
        rank = storage_file_rank(s.relative_path);
      } catch (const FormatError& e) {
        throw FormatError(r_.dir() + ": " + e.what());
      }
      last = &s.relative_path;
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
  const std::string name = role == "weight" || role == "other" ? param : param + "." + role;
  tensors_.push_back({name, param, role, dtype_of(e, r_.metadata().file), shape, {}});
  sources_.push_back({entry, base, {}});
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
    else {
      ModelKey k{e.fqn, dtype_of(e, md.file), e.tensor.size, {}};
      for (const ChunkMeta& c : e.tensor.chunks) k.chunks.push_back({c.offsets, c.sizes});
      model_keys.push_back(std::move(k));
    }
  }
  params_ = fpg::dcp::megatron_params(model_keys);
  const std::vector<MegatronParam>& params = params_;
  {
    const ParallelModel model(params);
    model_tp_ = model.tp();
    model_expert_tp_ = model.expert_tp();
    experts_ = model.experts();
  }

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
    const uint64_t base = p.key_offset;
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

// The bucket keys of one optimizer group and its stored bucket sizes.
struct DcpParams::GroupKeys {
  std::string prefix;
  GroupName name;
  struct Key {
    uint32_t gbuf = 0, bucket = 0;
    std::string state;
    size_t entry = 0;
  };
  std::vector<Key> keys;
  std::vector<std::string> states;  // first-seen order
  std::vector<StoredBuffer> stored;

  const Key* find(uint32_t gbuf, uint32_t bucket, const std::string& state) const {
    for (const Key& k : keys)
      if (k.gbuf == gbuf && k.bucket == bucket && k.state == state) return &k;
    return nullptr;
  }
};

namespace {

bool is_full_box(const Box& b, const std::vector<uint64_t>& shape) {
  return b.sizes == shape && std::all_of(b.offsets.begin(), b.offsets.end(), [](uint64_t o) { return o == 0; });
}

// Whether every stored chunk of the group's bucket keys lies inside one parameter's place or one
// padding range of the layout, as Megatron cuts them (a fragment per parameter and rank, a padding
// chunk per gap); the first that does not in `mismatch`.
template <typename Keys>
bool chunks_agree(const Metadata& md, const Keys& keys, const RecoveredLayout& r, std::string& mismatch) {
  for (const auto& k : keys) {
    const layout::Buffer* buf = nullptr;
    for (size_t b = 0; b < r.gbuf.size(); ++b)
      if (r.gbuf[b] == k.gbuf) buf = &r.layout.buffers[b];
    if (!buf || k.bucket >= buf->buckets.size()) continue;  // unmapped: reported apart
    const layout::Bucket& bucket = buf->buckets[k.bucket];
    std::vector<std::pair<uint64_t, uint64_t>> places;  // bucket coordinates, increasing
    for (uint64_t s = bucket.slots.begin; s < bucket.slots.end; ++s)
      places.emplace_back(buf->params[s].world.begin - bucket.world.begin, buf->params[s].world.end - bucket.world.begin);
    std::sort(places.begin(), places.end());
    for (const ChunkMeta& c : md.entries[k.entry].tensor.chunks) {
      if (c.offsets.size() != 1 || c.sizes.size() != 1 || c.sizes[0] == 0) continue;  // validate reports the arity
      const uint64_t lo = c.offsets[0], hi = lo + c.sizes[0];
      auto it = std::upper_bound(places.begin(), places.end(), std::make_pair(lo, UINT64_MAX));
      if (it != places.begin() && lo < std::prev(it)->second) {
        if (hi <= std::prev(it)->second) continue;
      } else if (std::any_of(bucket.padding.begin(), bucket.padding.end(),
                             [&](const layout::Range& p) { return p.begin <= lo && hi <= p.end; })) {
        continue;
      }
      mismatch = "key " + quoted_name(md.entries[k.entry].fqn) + " stores a chunk [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + ") that crosses a parameter boundary of the recomputed layout";
      return false;
    }
  }
  return true;
}

}  // namespace

bool DcpParams::recover_group(const GroupKeys& gk, OptimizerGroup& group, std::string& mismatch) const {
  const Metadata& md = r_.metadata();
  std::vector<MegatronParam> params;
  params.reserve(group.params.size());
  for (const LocalParam& lp : group.params) params.push_back(lp.local);
  const std::vector<StoredBuffer>& stored = gk.stored;

  // The DP size. The rank files alone do not tell it: a rank whose shards are all tail padding
  // stores nothing (as Megatron's fix for padding-only ranks does), and a fully parallel save may
  // store a shard in another rank's file. The chunk offsets do, whatever file holds them: at DP d a
  // bucket is cut into shards of L = padded / d, every chunk lies inside one shard, and every shard
  // that holds part of [0, numel_unpadded) begins with a chunk (a fragment or a gap). The group's
  // DP ranks write files whose ranks step evenly (by TP, or TP × PP, as the rank order has it): DP
  // rank k is the file k steps above the lowest. Candidates: the count of the group's files, and
  // d = padded / (start / k) for each file k > 0 and the first chunk it stores of each bucket. The
  // largest candidate the offsets fit, with a bucket spanning more than one shard, whose layout the
  // model keys and the stored chunks confirm, is taken.
  std::set<uint64_t> files;
  {
    // A group's chunks name a few files (its DP ranks'), over and over: kept distinct in a sorted
    // vector as they come, past a few thousand (a hostile index) collected and made distinct at the end.
    constexpr size_t kSorted = 4096;
    std::vector<uint64_t> distinct, more;
    for (const GroupKeys::Key& k : gk.keys)
      for (const ChunkMeta& ch : md.entries[k.entry].tensor.chunks)
        if (ch.storage != kNoStorage)
          if (const std::optional<uint64_t>& rank = storage_rank_[static_cast<size_t>(ch.storage)]) {
            const auto at = std::lower_bound(distinct.begin(), distinct.end(), *rank);
            if (at != distinct.end() && *at == *rank) continue;
            if (distinct.size() < kSorted) distinct.insert(at, *rank);
            else more.push_back(*rank);
          }
    files.insert(distinct.begin(), distinct.end());
    files.insert(more.begin(), more.end());
  }
  const uint32_t ranks_stored = static_cast<uint32_t>(std::clamp<size_t>(files.size(), 1, ckpt::kMaxRanks));
  const uint64_t r0 = files.empty() ? 0 : *files.begin();
  const uint64_t step = files.size() > 1 ? *std::next(files.begin()) - r0 : 1;
  auto dp_rank = [&](uint64_t rank) -> std::optional<uint64_t> {
    if (rank < r0 || (rank - r0) % step != 0) return std::nullopt;
    return (rank - r0) / step;
  };
  struct KeyChunks {
    uint64_t padded = 0, unpadded = 0;
    std::vector<std::pair<uint64_t, uint64_t>> chunks;  // [lo, hi), sorted
  };
  std::vector<KeyChunks> key_chunks;
  std::set<uint64_t> candidates{ranks_stored};
  for (const GroupKeys::Key& k : gk.keys) {
    if (k.gbuf >= stored.size() || k.bucket >= stored[k.gbuf].numel.size()) continue;
    const Entry& e = md.entries[k.entry];
    KeyChunks kc;
    kc.padded = stored[k.gbuf].numel[k.bucket];
    kc.unpadded = stored[k.gbuf].numel_unpadded[k.bucket];
    kc.chunks.reserve(e.tensor.chunks.size());
    std::vector<std::pair<uint64_t, uint64_t>> firsts;  // (DP rank, an offset its file stores of this key)
    for (const ChunkMeta& ch : e.tensor.chunks) {
      if (ch.offsets.size() != 1 || ch.sizes.size() != 1 || ch.sizes[0] > UINT64_MAX - ch.offsets[0]) continue;
      kc.chunks.emplace_back(ch.offsets[0], ch.offsets[0] + ch.sizes[0]);
      if (ch.storage == kNoStorage) continue;  // validate reports it
      const std::optional<uint64_t>& rank = storage_rank_[static_cast<size_t>(ch.storage)];
      const std::optional<uint64_t> dr = rank ? dp_rank(*rank) : std::nullopt;
      if (!dr || *dr == 0) continue;
      firsts.emplace_back(*dr, ch.offsets[0]);
    }
    // Per DP rank, the lowest offset its file stores of this key.
    std::sort(firsts.begin(), firsts.end());
    for (size_t i = 0; i < firsts.size(); ++i) {
      if (i > 0 && firsts[i].first == firsts[i - 1].first) continue;
      const auto [rank, start] = firsts[i];
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
  // The layout at DP d, if the bucket sizes and the stored chunks agree with it.
  auto recover = [&](uint64_t d, std::string& why) -> std::optional<RecoveredLayout> {
    std::optional<RecoveredLayout> r = recover_layout(params, stored, static_cast<uint32_t>(d), why);
    if (r && !chunks_agree(md, gk.keys, *r, why)) r.reset();
    return r;
  };
  std::optional<RecoveredLayout> found;
  uint32_t dp = ranks_stored;
  bool smallest = false;
  bool spanning = false;  // the DP was taken from shards that hold data
  size_t tried = 0;       // a hostile file may name many candidates: a few are tried
  for (auto it = candidates.rbegin(); it != candidates.rend() && tried < 64; ++it) {
    bool spans = false;
    if (*it == 0 || *it > ckpt::kMaxRanks || !fits(*it, spans) || !spans) continue;
    ++tried;
    std::string ignored;
    found = recover(*it, ignored);
    if (found) {
      dp = static_cast<uint32_t>(*it);
      spanning = true;
      break;
    }
  }
  if (!found) found = recover(dp, mismatch);
  // When only the first ranks store anything (every bucket smaller than a shard), nothing on disk
  // tells the DP size apart from its multiples: the smallest one the buckets' padding allows is
  // taken, whose layout reads every parameter where any of them would.
  if (!found && !stored.empty() && !stored[0].numel.empty()) {
    const uint64_t padded = stored[0].numel[0];
    tried = 0;
    for (uint64_t d = uint64_t{dp} + 1; d <= std::min<uint64_t>(padded, ckpt::kMaxRanks) && tried < 64; ++d) {
      if (padded % d != 0) continue;
      ++tried;
      std::string ignored;
      found = recover(d, ignored);
      if (found) {
        dp = static_cast<uint32_t>(d);
        smallest = true;
        break;
      }
    }
  }
  if (!found) return false;
  // Not taken from shards that hold data: twice the DP may read alike too, when every bucket lies in
  // the shards of the ranks that have files at that DP as well.
  if (!smallest && !spanning && uint64_t{dp} * 2 <= ckpt::kMaxRanks) {
    std::string ignored;
    const std::optional<RecoveredLayout> twice = recover_layout(params, stored, dp * 2, ignored);
    bool alike = twice.has_value();
    if (twice)
      for (const layout::Buffer& buf : twice->layout.buffers)
        for (const layout::Bucket& bucket : buf.buckets)
          alike = alike && bucket.numel_unpadded <= bucket.shard_numel * ranks_stored;
    smallest = alike;
  }
  group.layout = std::move(*found);
  group.rank_files.assign(files.begin(), files.end());
  group.dp = dp;
  group.dp_is_smallest = smallest;
  return true;
}

void DcpParams::check_saved_args(const MegatronCommonState& common, ParallelSizes& sizes, bool experts) const {
  const bool smallest = std::any_of(groups_.begin(), groups_.end(), [](const OptimizerGroup& g) { return g.dp_is_smallest; });
  std::string conflicts;
  auto against = [&](const char* arg, uint64_t recovered, const char* what) {
    const std::optional<int64_t> v = common.int_arg(arg);
    if (v && *v > 0 && static_cast<uint64_t>(*v) != recovered)
      conflicts += (conflicts.empty() ? "" : "; ") + std::string(arg) + " " + std::to_string(*v) + ", " + what + " " +
                   std::to_string(recovered);
  };
  against("tensor_model_parallel_size", sizes.tp, "the model keys' TP pieces give");
  against("pipeline_model_parallel_size", sizes.pp, "the optimizer groups give PP");
  if (experts) {
    against("expert_model_parallel_size", sizes.ep, "the expert groups give EP");
    against("expert_tensor_parallel_size", sizes.expert_tp, "the expert keys' pieces give expert TP");
  }
  const std::optional<int64_t> cp = common.int_arg("context_parallel_size");
  if (cp && *cp > 1 && *cp <= int64_t{ckpt::kMaxRanks}) {
    if (!smallest && sizes.dp % static_cast<uint64_t>(*cp) != 0)
      conflicts += (conflicts.empty() ? "" : "; ") + std::string("context_parallel_size ") + std::to_string(*cp) +
                   ", which does not divide the " + std::to_string(sizes.dp) + " ranks the optimizer shards over";
    else
      sizes.cp = static_cast<uint32_t>(*cp);
  }
  if (!smallest) against("data_parallel_size", sizes.dp / sizes.cp, "the buckets' shards give");
  if (!conflicts.empty())
    throw Error(ExitCode::check_failed, r_.dir() + ": the saved training args disagree with the checkpoint: " + conflicts);
}

void DcpParams::map_buckets(const std::vector<MegatronParam>& params, const std::vector<size_t>& bucket_entries) {
  const Metadata& md = r_.metadata();
  form_ = OptimizerForm::dp_reshardable;
  // Megatron-LM's saved args name a virtual pipeline. A common state that cannot be read leaves the
  // check to the buffers below (validate --data reports the item itself).
  std::optional<MegatronCommonState> common;
  try {
    common = read_common_state(r_);
  } catch (const FormatError&) {
  }
  if (common)
    if (const std::optional<int64_t> vpp = common->int_arg("virtual_pipeline_model_parallel_size"); vpp && *vpp > 1)
      throw UnsupportedError(r_.dir() + ": saved with virtual pipeline parallelism (the args record "
                             "virtual_pipeline_model_parallel_size " + std::to_string(*vpp) +
                             "); fpgather does not recover the interleaved stages of a virtual-pipeline run");

  // The groups, in first-seen order, with their keys and stored bucket sizes.
  std::vector<GroupKeys> gks;
  std::map<std::string, size_t> gk_of;
  for (size_t i : bucket_entries) {
    const BucketKey k = *parse_bucket_key(md.entries[i].fqn);
    auto [it, added] = gk_of.emplace(k.group, gks.size());
    if (added) {
      const std::optional<GroupName> name = parse_group_name(k.group);
      if (!name) throw FormatError(md.file + ": optimizer group " + quoted_name(k.group) + " has an index fpgather cannot read");
      gks.push_back({k.group, *name, {}, {}, {}});
    }
    GroupKeys& g = gks[it->second];
    if (std::find(g.states.begin(), g.states.end(), k.state) == g.states.end()) g.states.push_back(k.state);
    g.keys.push_back({k.gbuf, k.bucket, k.state, i});
  }
  for (GroupKeys& g : gks) {
    auto object = [&](const std::string& name) -> Value {
      for (const Entry& e : md.entries)
        if (!e.is_tensor && is_group_object(e.fqn, g.prefix, name)) return r_.read_object(e);
      throw FormatError(r_.dir() + ": dp_reshardable optimizer state without its '" + g.prefix + "." + name + "' object");
    };
    const auto padded = bucket_sizes(object(kPerBucketNumel), r_.dir() + ": " + g.prefix + "." + kPerBucketNumel);
    const auto unpadded =
        bucket_sizes(object(kPerBucketNumelUnpadded), r_.dir() + ": " + g.prefix + "." + kPerBucketNumelUnpadded);
    if (padded.size() != unpadded.size())
      throw Error(ExitCode::check_failed, r_.dir() + ": " + g.prefix + ": per_bucket_numel lists " +
                                              std::to_string(padded.size()) + " buffers, per_bucket_numel_unpadded " +
                                              std::to_string(unpadded.size()));
    for (size_t b = 0; b < padded.size(); ++b)
      g.stored.push_back({padded[b].first.first, padded[b].first.second, padded[b].second, unpadded[b].second});
    // Buffers are one per (param dtype, grad dtype) of a model chunk: a pair seen twice is a second
    // model chunk on the rank, as a virtual pipeline lays them out.
    std::map<std::pair<DType, DType>, size_t> first_of;  // a hostile file may list many buffers
    for (size_t b = 0; b < g.stored.size(); ++b) {
      const auto [it, fresh] = first_of.emplace(std::make_pair(g.stored[b].param_dtype, g.stored[b].grad_dtype), b);
      if (!fresh)
        throw UnsupportedError(r_.dir() + ": optimizer group " + quoted_name(g.prefix) + " has buffers gbuf_idx_" +
                               std::to_string(it->second) + " and gbuf_idx_" + std::to_string(b) + " of the same dtypes (" +
                               std::string(dtype_name(g.stored[b].param_dtype)) + ", " +
                               std::string(dtype_name(g.stored[b].grad_dtype)) +
                               "): one per model chunk, as virtual pipeline parallelism lays them out; fpgather "
                               "does not recover the interleaved stages of a virtual-pipeline run");
    }
  }

  // Dense and expert groups. With MoE the optimizer is chained: child 0 over the dense parameters,
  // child 1 over the experts.
  const ParallelModel model(params);
  std::vector<const GroupKeys*> dense, expert;
  for (const GroupKeys& g : gks) {
    const uint32_t child = g.name.chained.value_or(0);
    if (model.has_experts() && child == 1) expert.push_back(&g);
    else if (child == 0) dense.push_back(&g);
    else
      throw FormatError(r_.dir() + ": optimizer group " + quoted_name(g.prefix) +
                        (model.has_experts() ? " is a third chained optimizer; fpgather reads the dense (chained_0) and "
                                               "expert (chained_1) ones"
                                             : " is a chained optimizer's second child, but the model has no MoE experts"));
  }
  // MoE without a chained optimizer: a run at EP 1 registers its experts in the dense buffers.
  const bool experts_in_dense = model.has_experts() && expert.empty() &&
                                std::none_of(dense.begin(), dense.end(), [](const GroupKeys* g) { return g->name.chained; });
  if (model.has_experts() && expert.empty() && !experts_in_dense)
    throw FormatError(r_.dir() + ": the model has MoE experts but the dp_reshardable state no expert optimizer (chained_1)");
  // The expert orders a dense group is tried in: with its experts, both registrations; else none.
  std::vector<std::optional<ExpertOrder>> dense_orders{std::nullopt};
  if (experts_in_dense) dense_orders = {ExpertOrder::sequential, ExpertOrder::grouped};
  auto by_index = [](const GroupKeys* a, const GroupKeys* b) { return a->name.dp_group < b->name.dp_group; };
  std::sort(dense.begin(), dense.end(), by_index);
  std::sort(expert.begin(), expert.end(), by_index);
  auto check_indices = [&](const std::vector<const GroupKeys*>& gs, const char* what) {
    for (size_t i = 0; i < gs.size(); ++i)
      if (gs[i]->name.dp_group != i)
        throw FormatError(r_.dir() + ": the " + what + " optimizer groups are not dp_group_idx_0 … dp_group_idx_" +
                          std::to_string(gs.size() - 1) + " (found " + quoted_name(gs[i]->prefix) + ")");
  };
  check_indices(dense, "dense");
  check_indices(expert, "expert");
  if (dense.empty()) throw FormatError(r_.dir() + ": the dp_reshardable state has no dense optimizer group");

  // The parallel sizes: TP from the model keys' chunks, PP = dense groups / TP, EP = expert groups /
  // (expert TP × PP).
  ParallelSizes sizes;
  sizes.tp = model.tp();
  sizes.expert_tp = model.expert_tp();
  if (dense.size() % sizes.tp != 0)
    throw Error(ExitCode::check_failed, r_.dir() + ": " + std::to_string(dense.size()) +
                                            " dense optimizer groups do not divide by the tensor-parallel size " +
                                            std::to_string(sizes.tp) + " the model keys' chunks give");
  sizes.pp = static_cast<uint32_t>(dense.size() / sizes.tp);
  if (!expert.empty()) {
    const uint64_t per = uint64_t{sizes.pp} * sizes.expert_tp;
    if (expert.size() % per != 0)
      throw Error(ExitCode::check_failed, r_.dir() + ": " + std::to_string(expert.size()) +
                                              " expert optimizer groups do not divide by expert TP × PP = " +
                                              std::to_string(per));
    sizes.ep = static_cast<uint32_t>(expert.size() / per);
  }

  // The layers of each pipeline stage: even when they divide and the stored sizes agree, else
  // stage by stage the one layer count whose parameters reproduce the stage's unpadded bucket sizes
  // (a first or last stage with fewer layers).
  const uint64_t L = model.layers();
  const uint32_t PP = sizes.pp;
  // Each try recomputes a stage's layout: a hostile file claiming many stages and layers gets a bounded
  // number of them.
  constexpr uint64_t kMaxStageTries = 1u << 16;
  uint64_t stage_tries = 0;
  auto stage_fits = [&](uint32_t s, uint64_t first, uint64_t count, std::string& why) {
    if (++stage_tries > kMaxStageTries)
      throw Error(ExitCode::check_failed,
                  r_.dir() + ": the dp_reshardable optimizer state does not match Megatron's buffer layout recomputed "
                             "from the model keys: no split of " + std::to_string(L) + " layers over " +
                      std::to_string(PP) + " pipeline stages reproduces the stored bucket sizes within " +
                      std::to_string(kMaxStageTries) + " tries");
    // (The expert order does not change how much each buffer holds.)
    std::vector<MegatronParam> local;
    for (const LocalParam& lp : model.dense_rank(0, first, count, s == 0, s + 1 == PP, dense_orders.front()))
      local.push_back(lp.local);
    return matches_unpadded(local, dense[uint64_t{s} * sizes.tp]->stored, why);
  };
  if (PP == 1) {
    sizes.stage_layers = {L};
  } else {
    bool even = L % PP == 0;
    std::string why;
    for (uint32_t s = 0; even && s < PP; ++s) even = stage_fits(s, s * (L / PP), L / PP, why);
    if (even) sizes.stage_layers.assign(PP, L / PP);
    uint64_t first = 0;
    for (uint32_t s = 0; !even && s < PP; ++s) {
      std::optional<uint64_t> count;
      if (s + 1 == PP) {
        if (stage_fits(s, first, L - first, why)) count = L - first;
      } else {
        for (uint64_t c = 0; c <= L - first && !count; ++c)
          if (stage_fits(s, first, c, why)) count = c;
      }
      if (!count)
        throw Error(ExitCode::check_failed,
                    r_.dir() + ": the dp_reshardable optimizer state does not match Megatron's buffer layout "
                               "recomputed from the model keys: no layer count for pipeline stage " +
                        std::to_string(s) + " (" + quoted_name(dense[uint64_t{s} * sizes.tp]->prefix) +
                        ") reproduces its stored bucket sizes, after layers [0, " + std::to_string(first) + ")");
      sizes.stage_layers.push_back(*count);
      first += *count;
    }
  }
  std::vector<uint64_t> first_layer(PP, 0);
  for (uint32_t s = 1; s < PP; ++s) first_layer[s] = first_layer[s - 1] + sizes.stage_layers[s - 1];

  // Each group's local parameters and layout.
  const bool several = gks.size() > 1;
  auto refuse = [&](const GroupKeys& gk, const OptimizerGroup& g, const std::string& why) {
    std::string where;
    if (several)
      where = " (group " + quoted_name(gk.prefix) + ": " + (g.expert ? "expert TP rank " : "TP rank ") +
              std::to_string(g.tp) + (g.expert ? ", EP rank " + std::to_string(g.ep) : "") + ", PP rank " +
              std::to_string(g.pp) + ")";
    throw Error(ExitCode::check_failed, r_.dir() + ": the dp_reshardable optimizer state does not match Megatron's "
                                                   "buffer layout recomputed from the model keys" + where + ": " + why);
  };
  std::vector<const GroupKeys*> keys_of;
  for (const GroupKeys* gk : dense) {
    OptimizerGroup g;
    g.prefix = gk->prefix;
    g.index = gk->name.dp_group;
    g.tp = g.index % sizes.tp;
    g.pp = g.index / sizes.tp;
    std::string why;
    bool ok = false;
    for (const std::optional<ExpertOrder>& order : dense_orders) {
      g.params = model.dense_rank(g.tp, first_layer[g.pp], sizes.stage_layers[g.pp], g.pp == 0, g.pp + 1 == PP, order);
      std::string w;
      ok = recover_group(*gk, g, w);
      if (ok) {
        if (order) sizes.expert_order = *order;
        break;
      }
      if (why.empty()) why = w;
    }
    if (!ok) refuse(*gk, g, why);
    sizes.dp = std::max(sizes.dp, g.dp);
    groups_.push_back(std::move(g));
    keys_of.push_back(gk);
  }
  for (const GroupKeys* gk : expert) {
    OptimizerGroup g;
    g.prefix = gk->prefix;
    g.index = gk->name.dp_group;
    g.expert = true;
    g.tp = g.index % sizes.expert_tp;
    g.ep = (g.index / sizes.expert_tp) % sizes.ep;
    g.pp = g.index / (sizes.expert_tp * sizes.ep);
    std::string why;
    bool ok = false;
    for (ExpertOrder order : {ExpertOrder::sequential, ExpertOrder::grouped}) {
      g.params = model.expert_rank(g.tp, g.ep, sizes.ep, first_layer[g.pp], sizes.stage_layers[g.pp], order);
      std::string w;
      ok = recover_group(*gk, g, w);
      if (ok) {
        sizes.expert_order = order;
        break;
      }
      if (why.empty()) why = w;
    }
    if (!ok) refuse(*gk, g, why);
    sizes.expert_dp = std::max(sizes.expert_dp, g.dp);
    groups_.push_back(std::move(g));
    keys_of.push_back(gk);
  }
  if (expert.empty()) sizes.expert_dp = sizes.dp;
  sizes.experts_in_dense = experts_in_dense;
  if (common) check_saved_args(*common, sizes, model.has_experts());

  // Per parameter, the (group, local parameter) pairs holding it.
  std::vector<std::vector<std::pair<size_t, size_t>>> holders(params.size());
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> slot_of(groups_.size());  // (buffer, slot) per local param
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const OptimizerGroup& g = groups_[gi];
    slot_of[gi].assign(g.params.size(), {UINT32_MAX, 0});
    for (uint32_t b = 0; b < g.layout.layout.buffers.size(); ++b)
      for (uint32_t s = 0; s < g.layout.layout.buffers[b].params.size(); ++s)
        slot_of[gi][g.layout.layout.buffers[b].params[s].param] = {b, s};
    for (size_t li = 0; li < g.params.size(); ++li) holders[g.params[li].param].push_back({gi, li});
  }

  // Insert each parameter's states after its weight, keeping registration order.
  std::vector<ckpt::ParamTensor> tensors;
  std::vector<Source> sources;
  size_t t = 0;
  for (uint32_t p = 0; p < params.size(); ++p) {
    while (t < tensors_.size() && tensors_[t].param == params[p].name) {
      tensors.push_back(tensors_[t]);
      sources.push_back(sources_[t++]);
    }
    if (holders[p].empty()) continue;
    std::vector<std::string> ordered = keys_of[holders[p][0].first]->states;
    std::stable_partition(ordered.begin(), ordered.end(), [](const std::string& x) { return x == "param"; });
    for (const std::string& state : ordered) {
      std::vector<Piece> pieces;
      const Entry* first = nullptr;
      uint64_t covered = 0;
      for (const auto& [gi, li] : holders[p]) {
        const OptimizerGroup& g = groups_[gi];
        const auto [b, s] = slot_of[gi][li];
        if (b == UINT32_MAX) continue;
        const layout::Buffer& buf = g.layout.layout.buffers[b];
        const layout::ParamSlot& slot = buf.params[s];
        const layout::Bucket& bucket = buf.buckets[slot.bucket];
        const GroupKeys::Key* k = keys_of[gi]->find(g.layout.gbuf[b], slot.bucket, state);
        if (!k)
          throw FormatError(r_.dir() + ": no key for state " + quoted_name(state) + " of " + quoted_name(g.prefix) +
                            " buffer " + std::to_string(g.layout.gbuf[b]) + " bucket " + std::to_string(slot.bucket) +
                            ", which holds " + params[p].name);
        const Entry& e = md.entries[k->entry];
        if (e.tensor.size != std::vector<uint64_t>{bucket.numel_unpadded})
          throw Error(ExitCode::check_failed, r_.dir() + ": key " + quoted_name(e.fqn) + " has " +
                                                  std::to_string(shape_volume(e.tensor.size)) +
                                                  " elements, the bucket's numel_unpadded is " +
                                                  std::to_string(bucket.numel_unpadded));
        if (!first) first = &e;
        const uint64_t base = slot.world.begin - bucket.world.begin;
        for (const LocalParam::Piece& pc : g.params[li].pieces) {
          if (std::any_of(pieces.begin(), pieces.end(), [&](const Piece& x) { return x.box.offsets == pc.box.offsets && x.box.sizes == pc.box.sizes; })) continue;
          pieces.push_back({pc.box, k->entry, base + pc.local_start});
          covered += shape_volume(pc.box.sizes);
        }
      }
      if (!first) continue;
      if (covered != shape_volume(params[p].shape))
        throw Error(ExitCode::check_failed, r_.dir() + ": the optimizer groups hold " + std::to_string(covered) +
                                                " of the " + std::to_string(shape_volume(params[p].shape)) +
                                                " elements of parameter " + quoted_name(params[p].name) + "'s " +
                                                quoted_name(state));
      tensors.push_back({params[p].name + "." + master_or(state), params[p].name, master_or(state),
                         dtype_of(*first, md.file), params[p].shape, {}});
      if (pieces.size() == 1 && is_full_box(pieces[0].box, params[p].shape))
        sources.push_back({pieces[0].entry, pieces[0].base, {}});
      else
        sources.push_back({pieces[0].entry, pieces[0].base, std::move(pieces)});
    }
  }
  tensors_ = std::move(tensors);
  sources_ = std::move(sources);

  // Stored chunks that the layout says are padding (Megatron stores the gaps to pass DCP's cover check).
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const RecoveredLayout& lay = groups_[gi].layout;
    for (const GroupKeys::Key& k : keys_of[gi]->keys) {
      const layout::Buffer* buf = nullptr;
      for (size_t b = 0; b < lay.gbuf.size(); ++b)
        if (lay.gbuf[b] == k.gbuf) buf = &lay.layout.buffers[b];
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

  layout_ = groups_[0].layout;
  dp_ = groups_[0].dp;
  dp_is_smallest_ = groups_[0].dp_is_smallest;
  optimizer_prefix_ = groups_[0].prefix;
  parallel_ = std::move(sizes);
}

void DcpParams::map_plain() {
  const Metadata& md = r_.metadata();
  auto strip = [](std::string s) { return s.rfind("model.", 0) == 0 ? s.substr(6) : s; };
  // Where the state dict has a "model" section (torchtitan's {"model", "optimizer", "train_state",
  // "lr_scheduler", …}), the parameters are its keys and the other sections' tensors are state of
  // no parameter; otherwise every tensor key is a parameter.
  bool has_model = false;
  for (const Entry& e : md.entries)
    if (e.is_tensor && e.fqn.rfind("model.", 0) == 0) has_model = true;
  auto is_param = [&](const std::string& fqn) { return !has_model || fqn.rfind("model.", 0) == 0; };
  std::map<std::string, size_t> weight_of;
  std::vector<std::tuple<std::string, std::string, size_t>> states;  // param, state, entry
  for (size_t i = 0; i < md.entries.size(); ++i) {
    const Entry& e = md.entries[i];
    if (!e.is_tensor) continue;
    if (const auto ps = parse_plain_state(e.fqn)) states.emplace_back(strip(ps->first), ps->second, i);
    else if (is_param(e.fqn)) weight_of.emplace(strip(e.fqn), i);
  }
  if (!states.empty()) form_ = OptimizerForm::model_space;
  for (size_t i = 0; i < md.entries.size(); ++i) {
    const Entry& e = md.entries[i];
    if (!e.is_tensor || parse_plain_state(e.fqn)) continue;
    if (!is_param(e.fqn)) {
      unmapped_.push_back(e.fqn);
      add_plain(e.fqn, "other", i);
      continue;
    }
    const std::string name = strip(e.fqn);
    add_plain(name, "weight", i);
    for (const auto& [param, state, entry] : states)
      if (param == name && md.entries[entry].tensor.size == e.tensor.size) add_plain(name, state, entry);
  }
  for (const auto& [param, state, entry] : states) {
    auto w = weight_of.find(param);
    // A 0-d state is a per-parameter scalar (torch's Adam keeps its step so), not an elementwise
    // state of another shape: it is kept under its own key, as a key naming no parameter is.
    if (w == weight_of.end() || md.entries[entry].tensor.size.empty()) {
      unmapped_.push_back(md.entries[entry].fqn);
      add_plain(md.entries[entry].fqn, "other", entry);
    } else if (md.entries[entry].tensor.size != md.entries[w->second].tensor.size) {
      mismatches_.push_back({md.entries[entry].fqn, md.entries[entry].tensor.size, param, md.entries[w->second].fqn,
                             md.entries[w->second].tensor.size});
    }
  }
  for (size_t i = 0; i < md.entries.size(); ++i)
    if (!md.entries[i].is_tensor) {
      objects_.push_back(md.entries[i].fqn);
      object_entries_.push_back(i);
    }
}

void DcpParams::add_plain(const std::string& param, const std::string& role, size_t entry) {
  const Entry& e = r_.metadata().entries[entry];
  const TorchDType& t = *e.tensor.dtype;
  if (t.dtype) {
    add(param, role, entry, 0, e.tensor.size);
    byte_view_.resize(tensors_.size(), 0);
    return;
  }
  // A dtype fpgather has no counterpart of: its bytes, to compare; never exported as something else.
  unsupported_.push_back({e.fqn, "torch." + std::string(t.name)});
  if (t.element_bytes == 0) return;
  std::vector<uint64_t> shape = e.tensor.size;
  shape.push_back(t.element_bytes);
  ckpt::ParamTensor pt{role == "weight" ? param : role == "other" ? param : param + "." + role, param, role, DType::U8,
                       shape, "key " + quoted_name(e.fqn) + " has dtype torch." + std::string(t.name) +
                                  ", which fpgather cannot represent"};
  // The packed float4 pairs are safetensors' F4, two elements a byte along the last dimension; a
  // 0-d pair has no F4 shape (safetensors refuses it too).
  if (t.name == "float4_e2m1fn_x2" && !e.tensor.size.empty() && e.tensor.size.back() <= UINT64_MAX / 2) {
    pt.safetensors_dtype = DType::F4;
    pt.safetensors_shape = e.tensor.size;
    pt.safetensors_shape.back() *= 2;
    pt.unexportable += " in a DCP export (a safetensors export writes it as F4)";
  }
  tensors_.push_back(std::move(pt));
  sources_.push_back({entry, 0, {}});
  byte_view_.resize(tensors_.size(), 0);
  byte_view_.back() = t.element_bytes;
}

std::vector<uint8_t> DcpParams::object_bytes(size_t object) const {
  return r_.read_bytes(r_.metadata().entries.at(object_entries_.at(object)));
}

std::string DcpParams::object_text(size_t object) const {
  return r_.read_object(r_.metadata().entries.at(object_entries_.at(object))).repr(SIZE_MAX);
}

namespace {

// How many elements of `box` come before flat index g of `shape` in row-major order.
uint64_t box_elements_before(const Box& box, const std::vector<uint64_t>& shape, uint64_t g) {
  const size_t n = shape.size();
  uint64_t total = 1;
  for (uint64_t s : box.sizes) total *= s;
  if (g >= shape_volume(shape)) return total;
  std::vector<uint64_t> idx(n);
  for (size_t d = n; d-- > 0;) {
    idx[d] = g % shape[d];
    g /= shape[d];
  }
  uint64_t before = 0, inner = total;
  for (size_t d = 0; d < n; ++d) {
    inner = box.sizes[d] ? inner / box.sizes[d] : 0;
    if (idx[d] < box.offsets[d]) return before;
    if (idx[d] >= box.offsets[d] + box.sizes[d]) return before + box.sizes[d] * inner;
    before += (idx[d] - box.offsets[d]) * inner;
  }
  return before;
}

// The flat index in `shape` of element `local` of `box` (row-major both).
uint64_t box_to_flat(const Box& box, const std::vector<uint64_t>& shape, uint64_t local) {
  const size_t n = shape.size();
  uint64_t g = 0, stride = 1;
  for (size_t d = n; d-- > 0;) {
    const uint64_t i = box.sizes[d] ? local % box.sizes[d] : 0;
    local = box.sizes[d] ? local / box.sizes[d] : 0;
    g += (box.offsets[d] + i) * stride;
    stride *= shape[d];
  }
  return g;
}

}  // namespace

template <class F>
void DcpParams::chunks_in(size_t entry, uint64_t lo, uint64_t hi, F&& f) const {
  const Entry& e = r_.metadata().entries[entry];
  const std::vector<uint64_t> stride = key_strides(e.tensor.size);
  for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
    uint64_t first = 0, last = 0;
    if (chunk_extent(e.tensor.chunks[c], stride, first, last) && first < hi && last >= lo) f(c);
  }
}

template <class F>
void DcpParams::key_ranges(size_t t, uint64_t lo, uint64_t hi, F&& f) const {
  const Source& s = sources_[t];
  if (!s.pieces.empty()) {
    const std::vector<uint64_t>& shape = tensors_[t].shape;
    for (const Piece& pc : s.pieces) {
      const uint64_t a = box_elements_before(pc.box, shape, lo), b = box_elements_before(pc.box, shape, hi);
      if (a < b) f(pc.entry, pc.base + a, pc.base + b);
    }
    return;
  }
  if (const uint32_t eb = t < byte_view_.size() ? byte_view_[t] : 0; eb > 1) {
    f(s.entry, s.base + lo / eb, s.base + (hi + eb - 1) / eb);
    return;
  }
  f(s.entry, s.base + lo, s.base + hi);
}

const std::vector<std::pair<size_t, size_t>>& DcpParams::read_order(size_t t) const {
  if (read_order_.size() != sources_.size()) {
    read_order_.assign(sources_.size(), {});
    read_order_known_.assign(sources_.size(), false);
  }
  if (read_order_known_[t]) return read_order_[t];
  std::vector<std::pair<size_t, size_t>>& out = read_order_[t];
  key_ranges(t, 0, tensors_[t].numel(), [&](size_t entry, uint64_t lo, uint64_t hi) {
    chunks_in(entry, lo, hi, [&](size_t c) { out.emplace_back(entry, c); });
  });
  read_order_known_[t] = true;
  return out;
}

void DcpParams::plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t /*window*/) const {
  const Metadata& md = r_.metadata();
  std::lock_guard<std::mutex> lock(ask_mu_);
  plan_.clear();
  plan_items_.clear();
  plan_at_ = 0;
  asked_.assign(md.storage.size(), 0);
  std::vector<uint8_t> seen(md.storage.size(), 0);
  for (const ckpt::ParamRange& r : reads) {
    if (r.tensor >= sources_.size() || r.lo >= r.hi || r.hi > tensors_[r.tensor].numel()) continue;  // read() says why
    plan_.push_back({r.tensor, r.lo, r.hi, plan_items_.size()});
    key_ranges(r.tensor, r.lo, r.hi, [&](size_t entry, uint64_t lo, uint64_t hi) {
      chunks_in(entry, lo, hi, [&](size_t c) {
        const int64_t item = md.entries[entry].tensor.chunks[c].storage;
        if (item == kNoStorage || seen[static_cast<size_t>(item)]) return;
        seen[static_cast<size_t>(item)] = 1;
        plan_items_.emplace_back(entry, c);
      });
    });
  }
}

void DcpParams::follow_plan(size_t t, uint64_t lo, uint64_t hi) const {
  // Reads a few slabs apart, each of several pieces, start within this many planned reads.
  constexpr size_t kLookAhead = 1024;
  std::lock_guard<std::mutex> lock(ask_mu_);
  for (size_t k = plan_at_; k < plan_.size() && k < plan_at_ + kLookAhead; ++k)
    if (plan_[k].tensor == t && plan_[k].lo < hi && lo < plan_[k].hi) {
      plan_at_ = k;
      return;
    }
}

void DcpParams::prefetch(size_t t, size_t entry, const std::vector<size_t>& now, size_t chunk) const {
  // Past the chunks being read, 512 MiB stay asked for (page cache, not the reader's memory): the
  // disk keeps a deep queue while the reader copies, checksums and writes, and the keys of a
  // model-parallel checkpoint (a TP rank's bucket each) are read at once. On the H200 host's disk a
  // cold TP 2 × PP 2 export went from 0.85 to 0.96 of the copy rate with this window, every chunk
  // asked for and three slabs in flight (128 MiB, large chunks only, two slabs before).
  constexpr uint64_t kWindow = uint64_t{512} << 20;
  constexpr size_t kMaxChunks = 256;
  const Metadata& md = r_.metadata();
  // Each stored item is asked for once per pass: asking again for what the page cache holds or the
  // disk is reading walks the cache for nothing (a pass over a checkpoint asked for its bytes 22
  // times over when the reads of a tensor's pieces, out of order, restarted the asking). A read of
  // the first tensor after later ones starts a new pass.
  if (asked_.size() != md.storage.size()) asked_.assign(md.storage.size(), 0);
  if (plan_.empty() && t == 0 && furthest_read_ > 0) std::fill(asked_.begin(), asked_.end(), 0);
  furthest_read_ = std::max(furthest_read_, t);
  std::vector<std::pair<size_t, size_t>> ask;  // (entry, chunk)
  // Small chunks too: a norm's state is a small read at a distant offset, which waits on the disk as
  // long as a large one.
  auto want = [&](size_t e, size_t c) {
    const int64_t item = md.entries[e].tensor.chunks[c].storage;
    if (item == kNoStorage || asked_[static_cast<size_t>(item)]) return;
    asked_[static_cast<size_t>(item)] = 1;
    ask.emplace_back(e, c);
  };
  for (size_t c : now) want(entry, c);
  uint64_t window = 0;
  size_t walked = 0;
  if (!plan_.empty()) {
    // Then the planned reads' items from the read in progress on.
    for (size_t i = plan_[plan_at_].first_item; i < plan_items_.size() && walked < kMaxChunks && window < kWindow;
         ++i, ++walked) {
      window += r_.chunk_bytes(md.entries[plan_items_[i].first], plan_items_[i].second);
      want(plan_items_[i].first, plan_items_[i].second);
    }
  } else {
    // Then the chunks the following reads will want, in the order they will read them: this tensor's
    // after `chunk` of `entry`, then the next tensors' (every piece of each).
    const std::vector<std::pair<size_t, size_t>>& here = read_order(t);
    size_t i = 0;
    while (i < here.size() && here[i] != std::make_pair(entry, chunk)) ++i;
    i = i < here.size() ? i + 1 : 0;
    for (size_t tt = t; tt < sources_.size() && walked < kMaxChunks && window < kWindow; ++tt, i = 0) {
      const std::vector<std::pair<size_t, size_t>>& order = read_order(tt);
      for (; i < order.size() && walked < kMaxChunks && window < kWindow; ++i, ++walked) {
        window += r_.chunk_bytes(md.entries[order[i].first], order[i].second);
        want(order[i].first, order[i].second);
      }
    }
  }
  if (ask.empty()) return;
  // Finished askers go; a few may still wait on the disk's queue, more than that wait here.
  constexpr size_t kMaxAsking = 4;
  asking_.erase(std::remove_if(asking_.begin(), asking_.end(), [](const AsyncTask<void>& f) { return f.ready(); }),
                asking_.end());
  if (asking_.size() >= kMaxAsking) {
    asking_.front().get();
    asking_.erase(asking_.begin());
  }
  // Without a thread (the system refused one), the disk is not asked ahead: the reads ask as they go.
  std::optional<AsyncTask<void>> asking = try_start_async([this, ask = std::move(ask)] {
    const Metadata& m = r_.metadata();
    for (const auto& [e, c] : ask) r_.prefetch(m.entries[e], c);
  });
  if (asking) asking_.push_back(std::move(*asking));
}


void DcpParams::read(size_t t, uint64_t lo, uint64_t hi, void* out) const {
  const Source& s = sources_.at(t);
  follow_plan(t, lo, hi);
  if (const uint32_t eb = t < byte_view_.size() ? byte_view_[t] : 0; eb > 1) {
    // Bytes [lo, hi) of the stored elements that hold them.
    const uint64_t a = lo / eb, b = (hi + eb - 1) / eb;
    std::vector<uint8_t> whole(static_cast<size_t>((b - a) * eb));
    read_flat(t, s.entry, s.base, a, b, whole.data());
    std::memcpy(out, whole.data() + (lo - a * eb), static_cast<size_t>(hi - lo));
    return;
  }
  if (s.pieces.empty()) return read_flat(t, s.entry, s.base, lo, hi, out);
  // A tensor of pieces (a parameter's state from several TP ranks' buckets): each piece's elements
  // inside [lo, hi) are one run of the piece, read at once and then laid out by rows.
  const std::vector<uint64_t>& shape = tensors_.at(t).shape;
  const uint64_t elem = r_.metadata().entries[s.entry].tensor.dtype->element_bytes;
  auto* dst = static_cast<uint8_t*>(out);
  // The pieces live in distinct keys (one per TP rank's bucket): read at once, each on its own thread
  // but the first, so the disk sees all of them (a cold TP 2 export: 0.75 GB/s read one after the
  // other, 0.91 at once).
  auto read_piece = [&](const Piece& pc) {
    const uint64_t a = box_elements_before(pc.box, shape, lo), b = box_elements_before(pc.box, shape, hi);
    if (a >= b) return;
    if (is_row_major_run(shape, pc.box.offsets.data(), pc.box.sizes.data())) {
      read_flat(t, pc.entry, pc.base, a, b, dst + (box_to_flat(pc.box, shape, a) - lo) * elem);
      return;
    }
    // Not one run of the tensor (a column block of a row-parallel weight's state): its elements, one
    // run of its key, are read a block at a time into a buffer that stays in cache and laid out by
    // rows from there, not read whole into fresh memory and copied out of it afterwards (a pass over
    // memory and a page fault per 4 KiB more, for a third of a TP-split model's bytes).
    constexpr uint64_t kBlockBytes = uint64_t{1} << 20;
    const uint64_t row = shape.empty() ? 1 : pc.box.sizes.back();
    const uint64_t block = std::max<uint64_t>(1, kBlockBytes / elem);
    ByteBuffer run;  // filled whole by each read
    run.resize(static_cast<size_t>(std::min(block, b - a) * elem));
    for (uint64_t from = a; from < b; from += block) {
      const uint64_t to = std::min(b, from + block);
      read_flat(t, pc.entry, pc.base, from, to, run.data());
      for (uint64_t i = from; i < to;) {
        const uint64_t len = std::min(row - i % row, to - i);
        std::memcpy(dst + (box_to_flat(pc.box, shape, i) - lo) * elem, run.data() + (i - from) * elem, len * elem);
        i += len;
      }
    }
  };
  std::vector<AsyncTask<void>> others;
  for (size_t i = 1; i < s.pieces.size(); ++i) others.push_back(start_async([&read_piece, &s, i] { read_piece(s.pieces[i]); }));
  std::exception_ptr first;
  try {
    read_piece(s.pieces[0]);
  } catch (...) {
    first = std::current_exception();
  }
  for (auto& f : others) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

bool DcpParams::read_stored_piece(size_t t, const Box& box, void* out) const {
  if (t < byte_view_.size() && byte_view_[t] > 1) return false;
  for (const Piece& pc : sources_.at(t).pieces)
    if (pc.box.offsets == box.offsets && pc.box.sizes == box.sizes) {
      read_flat(t, pc.entry, pc.base, 0, shape_volume(box.sizes), out);
      return true;
    }
  return false;
}

void DcpParams::finish_reads() const {
  {
    std::lock_guard<std::mutex> lock(ask_mu_);
    plan_.clear();
    plan_items_.clear();
    plan_at_ = 0;
  }
  const Metadata& md = r_.metadata();
  for (const PartCrcLedger::Gap& g : part_crcs_.gaps()) {
    const Entry& e = md.entries[g.item.first];
    part_crcs_.fill(g, r_.open_chunk(e, g.item.second).record_crc(g.offset, g.size));
  }
}

void DcpParams::read_flat(size_t t, size_t entry, uint64_t base, uint64_t lo, uint64_t hi, void* out) const {
  const Source s{entry, base, {}};
  const Entry& e = r_.metadata().entries[s.entry];
  const std::vector<uint64_t>& size = e.tensor.size;
  const uint64_t elem = e.tensor.dtype->element_bytes;
  const uint64_t A = s.base + lo, B = s.base + hi;
  const size_t n = size.size();
  const std::vector<uint64_t> stride = key_strides(size);
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
  // Chunks that are one run of the key but wanted in part: those elements alone are read.
  struct Part {
    size_t chunk;
    uint64_t first, a, b;  // the chunk's first element in the key; the wanted ones, [a, b)
  };
  std::vector<Part> parts;
  std::vector<size_t> partial;
  size_t last_chunk = SIZE_MAX;
  for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
    const ChunkMeta& ch = e.tensor.chunks[c];
    uint64_t first = 0, last = 0;
    if (!chunk_extent(ch, stride, first, last) || first >= B || last + 1 <= A) continue;
    last_chunk = c;
    const bool one_run = is_row_major_run(size, ch.offsets.data(), ch.sizes.data());
    if (A <= first && last < B && one_run) {
      whole.push_back({c, first - A, last + 1 - first});
      copied += last + 1 - first;
    } else if (one_run) {
      parts.push_back({c, first, std::max(first, A), std::min(last + 1, B)});
      copied += parts.back().b - parts.back().a;
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
  std::vector<AsyncTask<void>> reading;
  for (size_t k = 1; k < readers; ++k)
    reading.push_back(start_async([&, k] {
      for (size_t i = k; i < whole.size(); i += readers)
        r_.read_chunk(e, whole[i].chunk, dst + whole[i].at * elem, whole[i].n * elem);
    }));
  for (const Part& p : parts) {
    const StoredChunk::PartRead got =
        r_.read_chunk_part(e, p.chunk, p.a - p.first, p.b - p.first, dst + (p.a - A) * elem);
    if (got.tracked)
      part_crcs_.add({s.entry, p.chunk}, r_.dir() + ": key " + quoted_name(e.fqn) + " chunk " + std::to_string(p.chunk),
                     got.record_size, got.record_crc, got.offset, got.size, got.crc);
  }
  if (!partial.empty()) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    for (size_t c : partial) {
      const ChunkMeta& ch = e.tensor.chunks[c];
      if (cache_.entry != s.entry || cache_.chunk != c) {
        cache_.entry = SIZE_MAX;
        // The item is opened (its view checked) and its length checked before a buffer of the
        // chunk's claimed size is made.
        r_.open_chunk(e, c);
        cache_.bytes.resize(r_.stored_chunk_bytes(e, c));
        r_.read_chunk(e, c, cache_.bytes.data(), cache_.bytes.size());
        cache_.entry = s.entry;
        cache_.chunk = c;
      }
      // Walk the chunk's rows (runs along the last axis), copying what falls inside [A, B).
      const uint64_t run = n ? ch.sizes[n - 1] : 1;
      const uint64_t rows = run ? shape_volume(ch.sizes) / run : 0;
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

std::vector<ckpt::Problem> check_param_mapping(const Reader& reader, std::unique_ptr<DcpParams>* view,
                                               std::string* unmapped) {
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
  } catch (const UnsupportedError& e) {
    if (unmapped) *unmapped = e.what();
    return {};
  } catch (const Error& e) {
    ckpt::Problem p;
    p.kind = e.code() == ExitCode::check_failed ? ckpt::ProblemKind::layout_mismatch : ckpt::ProblemKind::checksum;
    p.message = e.what();
    return {p};
  }
}

ValidationReport validate_with_params(const Reader& reader, const ValidateOptions& options,
                                      std::unique_ptr<DcpParams>* view, std::string* unmapped) {
  ValidationReport rep = validate(reader, options);
  if (rep.ok())
    for (auto& p : check_param_mapping(reader, view, unmapped)) rep.problems.push_back(std::move(p));
  return rep;
}

}  // namespace fpg::dcp
