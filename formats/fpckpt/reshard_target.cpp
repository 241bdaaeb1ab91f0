#include "formats/fpckpt/reshard_target.h"

#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "ckpt/coverage.h"
#include "ckpt/stored_states.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "ckpt/layout_save.h"
#include "layout/layout_json.h"
#include "model/spec_json.h"
#include "optim/routing.h"

namespace fpg::fpckpt {
namespace {

using nlohmann::json;

JsonDocument training_document(const ckpt::Documents& d, const char* name, const std::string& dir) {
  const auto text = d.get(name);
  if (!text)
    throw FormatError(dir + ": the index has no " + quoted_name(name) + " document: not a training checkpoint, nothing to reshard");
  return JsonDocument(*text, dir + ": document " + quoted_name(name));
}

const layout::BucketedLayout& bucketed_part(const pipeline::PipelineLayout& l) {
  return l.layer_wise ? l.layer_wise->scalar : *l.bucketed;
}

// Where (param, state) lies in the source checkpoint: one key, param element 0 at `offset`.
struct SourceMap {
  const ckpt::Index& ix;
  const RecordedRun& run;
  std::unordered_map<std::string, uint32_t> key_of;
  std::string dir;

  uint32_t key(const std::string& name) const {
    const auto it = key_of.find(name);
    if (it == key_of.end()) throw FormatError(dir + ": no key " + quoted_name(name) + ", which the reshard needs");
    return it->second;
  }
  bool has(const std::string& name) const { return key_of.count(name) != 0; }

  // Source key and the offset of the param's element 0 in it.
  std::pair<uint32_t, uint64_t> locate(uint32_t param, const std::string& state) const {
    const model::Param& p = run.spec.params.at(param);
    const bool matrix = run.layout.layer_wise && run.layout.layer_wise->owner(param).has_value();
    const auto& list = matrix ? run.matrix_states : run.states;
    if (std::find(list.begin(), list.end(), state) == list.end())
      throw UsageError(dir + ": param " + p.name + " has no optimizer state '" + state +
                       "' in the source; the target optimizer layout needs it");
    if (matrix || run.state_layout == ckpt::StateLayout::model) return {key(ckpt::model_state_key(p.name, state)), 0};
    const layout::BucketedLayout& L = bucketed_part(run.layout);
    const auto loc = L.locate(param);
    if (!loc) throw InternalError("reshard: source layout does not hold param " + p.name);
    const layout::Buffer& buf = L.buffers[loc->buffer];
    const layout::ParamSlot& slot = buf.params[loc->slot];
    const layout::Bucket& bucket = buf.buckets[slot.bucket];
    return {key(ckpt::bucket_state_key(loc->buffer, slot.bucket, state)), slot.world.begin - bucket.world.begin};
  }
};

// Builds one target rank's plan, mirroring app/checkpoint/state_save.cpp's order.
struct RankPlanner {
  ckpt::ReshardPlan& plan;
  const SourceMap& src;
  std::unordered_map<std::string, uint32_t>& plan_key_of;
  std::set<uint32_t>& consumed;  // source keys the plan reads through the layouts
  ckpt::RankPlan rp;

  uint32_t declare(const ckpt::Key& k) {
    auto it = plan_key_of.find(k.name);
    uint32_t id;
    if (it == plan_key_of.end()) {
      id = static_cast<uint32_t>(plan.keys.size());
      plan.keys.push_back(k);
      plan_key_of.emplace(k.name, id);
    } else {
      id = it->second;
    }
    if (std::find(rp.declares.begin(), rp.declares.end(), id) == rp.declares.end()) rp.declares.push_back(id);
    return id;
  }
  void copy(uint32_t key, uint64_t lo, uint64_t n, uint32_t src_key, uint64_t src_lo) {
    if (n == 0) return;
    const ckpt::Key& s = src.ix.keys[src_key];
    const ckpt::Key& t = plan.keys[key];
    if (s.dtype != t.dtype || src_lo + n > s.numel())
      throw FormatError(src.dir + ": key " + quoted_name(s.name) + " is " + std::string(dtype_name(s.dtype)) + " " +
                        shape_string(s.shape) + "; the target needs " + std::string(dtype_name(t.dtype)) + " [" +
                        std::to_string(src_lo) + ", " + std::to_string(src_lo + n) + ")");
    rp.runs.push_back({key, lo, n, src_key, src_lo});
  }
  // A source key copied over the same range under the same name, dtype, shape and kind.
  void same(const std::string& name, layout::Range r) {
    if (!src.has(name)) return;
    const uint32_t sk = src.key(name);
    consumed.insert(sk);
    copy(declare(src.ix.keys[sk]), r.begin, r.size(), sk, r.begin);
  }
};

ckpt::Documents target_documents(const ckpt::Documents& src, const std::string& dir, const RecordedRun& T) {
  ckpt::Documents d = src;  // model, fp8 (recipe, scales' keys, delayed settings), rng and any other: unchanged
  d.set(ckpt::doc::layout, T.layout.layer_wise ? layout::to_json(*T.layout.layer_wise) : layout::to_json(*T.layout.bucketed));
  json opt = training_document(src, ckpt::doc::optimizer, dir).value();
  opt["dist_opt"] = pipeline::dist_opt_name(T.config.dist_opt);
  ckpt::put_stored_states(opt, {T.state_layout, T.states,
                                T.layout.layer_wise ? T.matrix_states : std::vector<std::string>{}});
  d.set(ckpt::doc::optimizer, opt.dump());
  if (src.has(ckpt::doc::data)) {
    json data = training_document(src, ckpt::doc::data, dir).value();
    if (!data.is_object() || !data.contains("cursor") || !data["cursor"].is_object())
      throw FormatError(dir + ": document 'data': cursor: missing");
    data["cursor"]["dp"] = T.dp;
    data["cursor"]["accumulation"] = T.accumulation;
    d.set(ckpt::doc::data, data.dump());
  }
  return d;
}

std::vector<ckpt::RankPlan> plan_ranks(const ckpt::Index& ix, const std::string& dir, const RecordedRun& S,
                                       const RecordedRun& T, ckpt::ReshardPlan& plan) {
  SourceMap src{ix, S, {}, dir};
  for (uint32_t k = 0; k < ix.keys.size(); ++k) src.key_of.emplace(ix.keys[k].name, k);
  std::unordered_map<std::string, uint32_t> plan_key_of;
  std::set<uint32_t> consumed;
  for (uint32_t k = 0; k < ix.keys.size(); ++k)
    if (ix.keys[k].name.compare(0, ckpt::kOptimizerPrefix.size(), ckpt::kOptimizerPrefix) == 0) consumed.insert(k);
  const model::ModelSpec& spec = T.spec;
  const layout::BucketedLayout& TB = bucketed_part(T.layout);
  // Each FP8 param's scale-state keys: "fp8/<param>/<what>" other than the columnwise data.
  std::vector<std::vector<uint32_t>> scale_keys(spec.params.size());
  {
    std::unordered_map<std::string, uint32_t> param_of;
    for (uint32_t p = 0; p < spec.params.size(); ++p) param_of.emplace(ckpt::fp8_data_key(spec.params[p].name), p);
    for (uint32_t k = 0; k < ix.keys.size(); ++k) {
      const std::string& n = ix.keys[k].name;
      if (ix.keys[k].kind != ckpt::KeyKind::fp8_scale) continue;
      const size_t slash = n.rfind('/');
      if (slash == std::string::npos) continue;
      const auto it = param_of.find(n.substr(0, slash));
      if (it != param_of.end()) scale_keys[it->second].push_back(k);
    }
  }
  std::vector<ckpt::RankPlan> ranks;
  for (uint32_t r = 0; r < T.dp; ++r) {
    RankPlanner P{plan, src, plan_key_of, consumed, {}};
    P.rp.rank = r;
    // Bucketed part: the save's own plan for this layout and rank.
    ckpt::StateSaveOptions so;
    so.layout = T.state_layout;
    so.states = T.states;
    const ckpt::RankStatePlan sp = ckpt::plan_optimizer_state(spec, TB, r, so);
    std::vector<uint32_t> ids;
    for (const ckpt::Key& k : sp.keys) ids.push_back(P.declare(k));
    for (const ckpt::StateWrite& w : sp.writes) {
      const auto [sk, off] = src.locate(w.param, w.state);
      P.copy(ids[w.key], w.key_lo, w.param_range.size(), sk, off + w.param_range.begin);
    }
    for (const ckpt::Padding& p : sp.padding) P.rp.padding.push_back({ids[p.key], p.lo, p.hi});
    // What this rank updates: its bucketed fragments, then its layer-wise matrices whole.
    std::vector<std::pair<uint32_t, layout::Range>> owned;
    for (const layout::RankFragment& f : layout::rank_fragments(TB, r))
      owned.push_back({f.fragment.param, f.fragment.param_range});
    if (T.layout.layer_wise) {
      for (uint32_t m : T.layout.layer_wise->ranks.at(r).owned) {
        const layout::OwnedMatrix& om = T.layout.layer_wise->matrices[m];
        const model::Param& p = spec.params.at(om.param);
        for (const std::string& s : T.matrix_states) {
          const auto [sk, off] = src.locate(om.param, s);
          const uint32_t k = P.declare({ckpt::model_state_key(p.name, s), DType::F32, p.shape,
                                        s == "master" ? ckpt::KeyKind::master : ckpt::KeyKind::optimizer_state});
          P.copy(k, 0, p.numel(), sk, off);
        }
        owned.push_back({om.param, layout::Range{0, p.numel()}});
      }
    }
    // Weights (or FP8 data) over the same ranges.
    for (const auto& [param, range] : owned) {
      const std::string& name = spec.params.at(param).name;
      P.same(ckpt::weight_key(name), range);
      P.same(ckpt::fp8_data_key(name), range);
      P.same(ckpt::fp8_columnwise_key(name), range);
    }
    // FP8 scale state, whole, by the owner of element 0.
    for (const auto& [param, range] : owned)
      if (range.begin == 0 && range.size() > 0)
        for (uint32_t k : scale_keys[param]) {
          consumed.insert(k);
          P.copy(P.declare(ix.keys[k]), 0, ix.keys[k].numel(), k, 0);
        }
    ranks.push_back(std::move(P.rp));
  }
  // Anything else (not training state this fpgather knows): rank 0 copies its data and declared padding as is.
  const auto by_key = ckpt::intervals_by_key(ix);
  for (uint32_t k = 0; k < ix.keys.size(); ++k) {
    if (consumed.count(k)) continue;
    RankPlanner P{plan, src, plan_key_of, consumed, std::move(ranks[0])};
    const uint32_t id = P.declare(ix.keys[k]);
    uint64_t lo = 0, hi = 0;  // the data run being extended
    for (const ckpt::KeyInterval& iv : by_key[k]) {
      if (iv.padding) {
        P.rp.padding.push_back({id, iv.lo, iv.hi});
      } else if (iv.lo == hi && hi > lo) {
        hi = iv.hi;
      } else {
        P.copy(id, lo, hi - lo, k, lo);
        lo = iv.lo, hi = iv.hi;
      }
    }
    P.copy(id, lo, hi - lo, k, lo);
    ranks[0] = std::move(P.rp);
  }
  return ranks;
}

}  // namespace

RecordedRun recorded_run(const ckpt::Documents& docs, const std::string& dir) {
  RecordedRun r;
  training_document(docs, ckpt::doc::model, dir);  // present, and JSON
  r.spec = model::parse_spec_json(*docs.get(ckpt::doc::model), dir + ": document 'model'");
  const JsonDocument opt_doc = training_document(docs, ckpt::doc::optimizer, dir);
  const JsonDocument lay_doc = training_document(docs, ckpt::doc::layout, dir);
  const std::string layout_text = *docs.get(ckpt::doc::layout);
  pipeline::PipelineConfig& c = r.config;
  const JsonField opt = opt_doc.root();
  const auto kind = optim::parse_optimizer(opt.get<std::string>("name"));
  if (!kind) opt.at("name").fail("unknown optimizer");
  c.optimizer = *kind;
  if (const auto so = opt.find("scalar_optimizer")) {
    const auto s = optim::parse_scalar_optimizer(so->str());
    if (!s) so->fail("unknown scalar optimizer");
    c.scalar_optimizer = *s;
  }
  const ckpt::StoredStates stored = ckpt::read_stored_states(opt);
  r.state_layout = stored.layout;
  r.states = stored.states;
  r.matrix_states = stored.matrix_states;
  const JsonField lk = lay_doc.root().at("kind");
  if (lk.str() != "bucketed" && lk.str() != "layer_wise") lk.fail("unknown layout kind " + quoted_name(lk.str()));
  c.dist_opt = lk.str() == "layer_wise" ? pipeline::DistOpt::layerwise : pipeline::DistOpt::bucketed;
  const JsonDocument fp8_doc = training_document(docs, ckpt::doc::fp8, dir);
  c.fp8.enabled = fp8_doc.root().get<bool>("enabled", false);
  if (docs.has(ckpt::doc::data))
    r.accumulation = training_document(docs, ckpt::doc::data, dir).root().at("cursor").get<uint64_t>("accumulation");
  // The recorded layout, and the options that rebuild it.
  if (c.dist_opt == pipeline::DistOpt::layerwise) {
    r.layout.layer_wise = layout::layer_wise_layout_from_json(layout_text, dir + ": document 'layout'");
    const auto& s = r.layout.layer_wise->scalar;
    r.dp = r.layout.layer_wise->dp;
    c.bucket_size = s.bucket_size;
    c.pad_for_nccl = s.pad_for_nccl;
    c.fp32_matrices = r.layout.layer_wise->fp32_matrices;
  } else {
    r.layout.bucketed = layout::bucketed_layout_from_json(layout_text, dir + ": document 'layout'");
    r.dp = r.layout.bucketed->dp;
    c.bucket_size = r.layout.bucketed->bucket_size;
    c.pad_for_nccl = r.layout.bucketed->pad_for_nccl;
  }
  const pipeline::PipelineLayout rebuilt = pipeline::build_pipeline_layout(r.spec, c, r.dp);
  const bool same = r.layout.layer_wise ? *rebuilt.layer_wise == *r.layout.layer_wise : *rebuilt.bucketed == *r.layout.bucketed;
  if (!same)
    throw FormatError(dir + ": document 'layout' is not the layout this fpgather computes for the recorded model, "
                            "optimizer and options; cannot reshard it");
  return r;
}


ReshardTarget plan_reshard(const ckpt::Index& ix, const std::string& dir, const ReshardOptions& o) {
  if (o.dp == 0) throw UsageError("dp must be at least 1");
  if (o.accumulation && *o.accumulation == 0) throw UsageError("accumulation must be at least 1");
  ReshardTarget out;
  out.source = recorded_run(ix.documents, dir);
  const RecordedRun& S = out.source;
  RecordedRun& T = out.target;
  T = S;
  T.dp = o.dp;
  pipeline::PipelineConfig& c = T.config;
  if (o.dist_opt) c.dist_opt = *o.dist_opt;
  if (o.state_layout) T.state_layout = *o.state_layout;
  if (o.bucket_size) c.bucket_size = *o.bucket_size;
  if (o.pad_for_nccl) c.pad_for_nccl = *o.pad_for_nccl;
  if (c.bucket_size && *c.bucket_size == 0) throw UsageError("bucket_size must be positive");
  if (c.optimizer == optim::OptimizerKind::muon && c.dist_opt == pipeline::DistOpt::bucketed)
    throw UsageError("cannot reshard a Muon checkpoint to dist_opt bucketed: Muon's momentum_buffer "
                     "belongs to whole matrices (Newton-Schulz orthogonalizes the full matrix), and the bucketed "
                     "distributed optimizer cuts params into equal shards across ranks; keep dist_opt layerwise");
  // The global batch (dp x accumulation micro-batches) stays, so the data stream does.
  const uint64_t global = static_cast<uint64_t>(S.dp) * S.accumulation;
  if (o.accumulation) T.accumulation = *o.accumulation;
  else if (global % o.dp == 0) T.accumulation = global / o.dp;
  else
    throw UsageError("reshard: the source's global batch of " + std::to_string(global) + " micro-batches (DP " +
                     std::to_string(S.dp) + " x accumulation " + std::to_string(S.accumulation) +
                     ") does not split over " + std::to_string(o.dp) +
                     " ranks; give accumulation K to choose one (the data stream then changes)");
  T.layout = pipeline::build_pipeline_layout(T.spec, c, o.dp);
  // Same optimizer: the bucketed part keeps its states; the layer-wise matrices take theirs.
  T.states = S.states;
  T.matrix_states = S.matrix_states;
  out.plan.documents = target_documents(ix.documents, dir, T);
  out.plan.ranks = plan_ranks(ix, dir, S, T, out.plan);
  return out;
}

}  // namespace fpg::fpckpt
