#include "formats/dcp/megatron/megatron_reshard.h"

#include "formats/dcp/megatron/parallel_report.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "core/printable.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/shape.h"
#include "core/thread_pool.h"
#include "formats/dcp/dcp_params.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/megatron/bucket_writer.h"
#include "formats/dcp/megatron/group_reshard.h"
#include "formats/dcp/megatron/model_parallel_reshard.h"
#include "formats/dcp/megatron/megatron_keys.h"
#include "formats/dcp/megatron/megatron_layout.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/validate.h"

namespace fpg::dcp {
namespace {

using Kind = Value::Kind;

// A bytes item is carried into the target unchanged, but decoded first, as Megatron will decode it:
// one the restricted unpickler refuses (a global outside the allow-list, tensors past their budget)
// stops the reshard instead of passing into a checkpoint meant to be loaded.
void check_carried_object(const Reader& r, const Entry& e) {
  try {
    r.read_object(e);
  } catch (const FormatError& ex) {
    throw FormatError(r.dir() + ": bytes item " + quoted_name(e.fqn) + " cannot be carried into the resharded checkpoint: " +
                      ex.what());
  }
}

const char* form_name(MegatronForm f) {
  return f == MegatronForm::dp_reshardable ? "dp_reshardable" : "fully_reshardable";
}


const Value& field(const Value& dict, const std::string& key, const std::string& where) {
  const Value* v = dict.is(Kind::dict) ? dict.find(key) : nullptr;
  if (!v) throw FormatError(where + ": no " + quoted_name(key) + " in " + dict.repr(120));
  return *v;
}

struct Source {
  const Reader& r;
  const DcpParams& params;
  std::map<std::pair<std::string, std::string>, size_t> tensor;  // (param, role) -> tensor index

  // Elements [lo, hi) of (param, role) into dst (4-byte states).
  void read(const std::string& param, const std::string& role, uint64_t lo, uint64_t hi, void* dst) const {
    params.read(find(param, role), lo, hi, dst);
  }
  // Box `box` of (param, role) into dst where SRC stores exactly that box as one piece (DcpParams).
  bool read_stored_piece(const std::string& param, const std::string& role, const Box& box, void* dst) const {
    return params.read_stored_piece(find(param, role), box, dst);
  }

 private:
  size_t find(const std::string& param, const std::string& role) const {
    const auto it = tensor.find({param, role});
    if (it == tensor.end()) throw FormatError(r.dir() + ": parameter " + param + " has no " + role);
    return it->second;
  }
};

// A torch_dist fill of a state from element lo on, read per call and counted on `bar`.
FillBytes state_fill(const Source& s, Progress& bar, std::string param, std::string role, uint64_t lo) {
  return element_fill(
      [&s, &bar, param, role](uint64_t a, uint64_t b, uint8_t* dst) {
        s.read(param, role, a, b, dst);
        bar.advance((b - a) * 4);
      },
      lo);
}

// Chunk `c` of a model key of shape `key_shape` holding `layers`' parameters one after another
// (the leading axes the stacked layers and experts), into dst, each layer's part of the chunk read
// as the piece SRC stores it as; false where one is not a stored piece (what was read then is
// overwritten by the caller's reads).
bool read_layer_pieces(const Source& source, const std::vector<const MegatronParam*>& layers, const std::string& role,
                       const std::vector<uint64_t>& key_shape, const ChunkMeta& c, uint8_t* dst) {
  const size_t n = key_shape.size(), inner_n = layers.front()->shape.size();
  if (inner_n > n) return false;
  const size_t k = n - inner_n;  // the leading axes
  Box inner;
  inner.offsets.assign(c.offsets.begin() + static_cast<std::ptrdiff_t>(k), c.offsets.end());
  inner.sizes.assign(c.sizes.begin() + static_cast<std::ptrdiff_t>(k), c.sizes.end());
  const uint64_t inner_bytes = shape_volume(inner.sizes) * 4;
  std::vector<uint64_t> at(k, 0);
  for (uint64_t done = 0, count = shape_volume(std::vector<uint64_t>(c.sizes.begin(), c.sizes.begin() + static_cast<std::ptrdiff_t>(k)));
       done < count; ++done) {
    uint64_t layer = 0;
    for (size_t d = 0; d < k; ++d) layer = layer * key_shape[d] + c.offsets[d] + at[d];
    if (layer >= layers.size() || layers[layer]->shape != std::vector<uint64_t>(key_shape.begin() + static_cast<std::ptrdiff_t>(k), key_shape.end()) ||
        !source.read_stored_piece(layers[layer]->name, role, inner, dst + done * inner_bytes))
      return false;
    for (size_t d = k; d-- > 0;) {
      if (++at[d] < c.sizes[d]) break;
      at[d] = 0;
    }
  }
  return true;
}

}  // namespace

void add_plan_figures(const Reader& r, const std::function<bool(const Entry&)>& optimizer, uint64_t optimizer_bytes,
                      MegatronReshardSummary& sum) {
  const Metadata& md = r.metadata();
  sum.plan_read = sum.plan_written = 0;
  for (const StorageEntry& s : md.storage) sum.plan_read += s.length;
  sum.plan_peak = DcpWriteOptions{}.io_block_bytes;
  for (const Entry& e : md.entries) {
    if (optimizer(e)) continue;
    if (e.is_tensor) {
      for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
        const uint64_t n = r.chunk_bytes(e, c);
        sum.plan_written += n;
        sum.plan_peak = std::max(sum.plan_peak, n);
      }
    } else if (e.storage != kNoStorage) {
      const uint64_t n = md.storage[static_cast<size_t>(e.storage)].length;
      sum.plan_written += n;
      sum.plan_peak = std::max(sum.plan_peak, n);
    }
  }
  sum.plan_written += optimizer_bytes;
}

std::optional<MegatronForm> parse_megatron_form(const std::string& name) {
  for (MegatronForm f : {MegatronForm::dp_reshardable, MegatronForm::fully_reshardable})
    if (name == form_name(f)) return f;
  return std::nullopt;
}

MegatronReshardSummary reshard_megatron(const std::string& src, const std::string& dst,
                                        const MegatronReshardOptions& opts) {
  if (opts.dp == 0) throw UsageError("dp must be at least 1");
  const Reader r(src);
  if (!r.megatron())
    throw UsageError(src + " is a PyTorch DCP checkpoint without Megatron's metadata.json; reshard rewrites the "
                     "distributed-optimizer state of Megatron torch_dist checkpoints");
  if (opts.validate) require_valid(r, "reshard it");
  const DcpParams params(r);
  require_no_shape_mismatch(params, "reshard it");
  const Metadata& md = r.metadata();
  // A chained optimizer's children are a MoE run's dense and expert distributed optimizers (bucket
  // keys and group objects) or a layer-wise optimizer's per-parameter state (model-space keys).
  for (const Entry& e : md.entries)
    if (is_chained_key(e.fqn) && e.fqn.find("." + std::string(kModelSpacePrefix) + ".") != std::string::npos)
      throw UsageError(src + " holds a chained (layer-wise) optimizer's per-parameter state ('" + e.fqn +
                       "'): it has no distributed-optimizer buckets to reshard");
  MegatronForm from;
  if (params.optimizer_form() == OptimizerForm::dp_reshardable) from = MegatronForm::dp_reshardable;
  else if (params.optimizer_form() == OptimizerForm::model_space) from = MegatronForm::fully_reshardable;
  else throw UsageError(src + " holds no distributed-optimizer state");
  const MegatronForm to = opts.to.value_or(from);
  // A source saved at model parallelism (one optimizer group per model-parallel rank, over that
  // rank's local parameters; with MoE a chained dense and expert optimizer) is read per parameter
  // whole, so its model-space form is written from any layout. The buckets written for
  // dp_reshardable are one optimizer group's over the whole parameters: the layout of a run at
  // TP = PP = EP = 1, which does not re-slice them for model-parallel ranks.
  const bool model_parallel = (params.groups().size() > 1 && params.parallel()) || params.experts() > 0;
  // Into dp_reshardable at model parallelism: each group's buckets rewritten for the new DP size at
  // the same TP × PP (group_reshard.h), a MoE model's groups laid out again as at another TP × PP × EP
  // (model_parallel_reshard.h); a source stored in model space is refused.
  const bool buckets_rewrite = model_parallel && to == MegatronForm::dp_reshardable && from == MegatronForm::dp_reshardable;
  const bool group_rewrite = buckets_rewrite && params.experts() == 0;
  if (model_parallel && to == MegatronForm::dp_reshardable && !buckets_rewrite)
    throw UsageError(src +
                     (params.parallel() ? " was saved at " + parallel_sizes_string(*params.parallel()) + " (" +
                                              std::to_string(params.groups().size()) +
                                              " optimizer groups, one per model-parallel rank)"
                                        : std::string()) +
                     (params.experts() > 0 ? std::string(params.parallel() ? " and" : "") + " holds a MoE model (" +
                                                 std::to_string(params.experts()) + " experts per MoE layer)"
                                           : std::string()) +
                     " in model space; reshard writes dp_reshardable buckets from dp_reshardable sources only: "
                     "Megatron-Core loads the model-space form at any parallelism as it is");
  // Model keys in tensor-parallel pieces: the source ran at TP > 1 (pipeline stages and expert ranks
  // leave no trace in the model space: their chunks split stacked layers and experts as at PP = EP = 1).
  if (from == MegatronForm::fully_reshardable && to == MegatronForm::dp_reshardable &&
      (params.model_tp() > 1 || params.model_expert_tp() > 1))
    throw UsageError(src + ": model keys are stored in TP " + std::to_string(params.model_tp()) +
                     (params.model_expert_tp() > 1 ? " (experts: expert TP " + std::to_string(params.model_expert_tp()) + ")" : "") +
                     " pieces; reshard writes dp_reshardable buckets from checkpoints saved at TP = 1 only");

  MegatronReshardSummary sum;
  sum.source_form = form_name(from);
  sum.target_form = form_name(to);

  Source source{r, params, {}};
  std::vector<std::string> roles;  // master first, then the states in first-seen order
  for (size_t t = 0; t < params.tensors().size(); ++t) {
    const ckpt::ParamTensor& pt = params.tensors()[t];
    source.tensor[{pt.param, pt.role}] = t;
    if (pt.role != "weight" && std::find(roles.begin(), roles.end(), pt.role) == roles.end()) roles.push_back(pt.role);
  }
  std::stable_partition(roles.begin(), roles.end(), [](const std::string& x) { return x == "master"; });
  std::vector<std::string> states;  // Megatron's names of the roles
  std::map<std::string, std::string> role_of;
  for (const std::string& role : roles) {
    states.push_back(megatron_state_name(role));
    role_of[states.back()] = role;
  }

  // Another TP or PP size: each target rank's local parameters cut again from the whole ones.
  const std::optional<ParallelSizes>& sizes = params.parallel();
  const bool new_tp = opts.tp && *opts.tp != (sizes ? sizes->tp : params.model_tp());
  const bool new_pp = opts.pp && *opts.pp != (sizes ? sizes->pp : 1);
  const bool new_ep = opts.ep && *opts.ep != (sizes ? sizes->ep : 1);
  const bool new_stages = opts.first_stage_layers || opts.last_stage_layers;
  if ((opts.tp && *opts.tp == 0) || (opts.pp && *opts.pp == 0) || (opts.ep && *opts.ep == 0))
    throw UsageError("tp, pp and ep must be at least 1");
  if (new_tp || new_pp || new_ep || new_stages) {
    if (to != MegatronForm::dp_reshardable)
      throw UsageError("tp, pp and ep set the layout of dp_reshardable targets; the fully_reshardable form is the "
                       "same at every TP x PP x EP and Megatron-Core loads it at any");
    if (from != MegatronForm::dp_reshardable)
      throw UsageError(src + " is fully_reshardable: it records no bucket layout to carry to another TP x PP x EP; "
                       "Megatron-Core loads it at any TP x PP x EP as it is");
  }
  if (new_tp || new_pp || new_ep || new_stages || (buckets_rewrite && !group_rewrite))
    return reshard_model_parallel(r, params, states, role_of, opts, dst);
  if (group_rewrite) return reshard_groups(r, params, states, opts, dst);

  // The target buffer layout.
  const std::vector<MegatronParam>& mparams = params.megatron_params();
  const model::ModelSpec spec = megatron_spec(mparams);
  layout::BucketedOptions lo;
  lo.dp = opts.dp;
  if (from == MegatronForm::dp_reshardable) {
    const layout::BucketedLayout& S = params.layout()->layout;
    lo.bucket_size = opts.bucket_size.value_or(S.bucket_size);
    lo.pad_for_nccl = opts.pad_for_nccl.value_or(S.pad_for_nccl);
    lo.grad_reduce_in_fp32 = std::all_of(S.buffers.begin(), S.buffers.end(),
                                         [](const layout::Buffer& b) { return b.key.grad_dtype == DType::F32; });
  } else {
    if (to == MegatronForm::dp_reshardable && !opts.bucket_size)
      throw UsageError(src + " is fully_reshardable and records no bucket layout: give bucket_size N or none, as "
                       "the Megatron run that loads it is configured");
    lo.bucket_size = opts.bucket_size.value_or(std::nullopt);
    lo.pad_for_nccl = opts.pad_for_nccl.value_or(false);
    sum.grad_dtype_assumed = to == MegatronForm::dp_reshardable;
  }
  if (to == MegatronForm::dp_reshardable) {
    sum.target = layout::build_bucketed_layout(spec, lo);
    for (const layout::Buffer& buf : sum.target.buffers)
      for (const layout::Bucket& bucket : buf.buckets)
        for (const layout::Shard& shard : bucket.shards)
          if (shard.world.begin - bucket.world.begin >= bucket.numel_unpadded)
            sum.first_padding_only_rank = std::min(sum.first_padding_only_rank.value_or(shard.rank), shard.rank);
  }
  // Which source entries are optimizer state (replaced) and which are carried over: every group's
  // buckets and objects (a MoE run's under "chained_N.").
  const std::string group = from == MegatronForm::dp_reshardable ? params.optimizer_prefix()
                                                                  : kFirstGroup;
  std::vector<std::string> groups{group};
  for (const OptimizerGroup& g : params.groups())
    if (g.prefix != group) groups.push_back(g.prefix);
  auto is_group_entry = [&](const std::string& key, const char* name) {
    return std::any_of(groups.begin(), groups.end(), [&](const std::string& g) { return is_group_object(key, g, name); });
  };
  auto is_optimizer = [&](const Entry& e) {
    if (e.is_tensor) return e.fqn.rfind("optimizer.", 0) == 0 || (is_chained_key(e.fqn) && parse_bucket_key(e.fqn));
    return is_group_entry(e.fqn, kPerBucketNumel) || is_group_entry(e.fqn, kPerBucketNumelUnpadded) ||
           is_group_entry(e.fqn, kParamGroups);
  };
  // What the optimizer state takes written: 4 bytes a state element.
  uint64_t optimizer_bytes = 0;
  if (to == MegatronForm::dp_reshardable) {
    for (const layout::Buffer& buf : sum.target.buffers)
      for (const layout::Bucket& bucket : buf.buckets) optimizer_bytes += bucket.numel_unpadded * 4 * states.size();
  } else {
    for (const MegatronParam& p : mparams) {
      uint64_t n = 1;
      for (uint64_t d : p.shape) n *= d;
      optimizer_bytes += n * 4 * roles.size();
    }
  }
  add_plan_figures(r, is_optimizer, optimizer_bytes, sum);
  if (opts.dry_run) return sum;

  const Entry* common = nullptr;
  const Entry* param_groups = nullptr;
  // A chained optimizer's children: each one's param_groups, from its first group's object.
  std::map<int64_t, const Entry*> chained_param_groups;
  for (const Entry& e : md.entries) {
    if (e.is_tensor) continue;
    if (e.fqn.rfind(kCommonStatePrefix, 0) == 0) common = &e;
    if (is_group_object(e.fqn, group, kParamGroups)) param_groups = &e;
    for (const OptimizerGroup& g : params.groups()) {
      const std::optional<GroupName> name = parse_group_name(g.prefix);
      if (!name || !name->chained || !is_group_object(e.fqn, g.prefix, kParamGroups)) continue;
      const Entry*& first = chained_param_groups[*name->chained];
      if (!first || name->dp_group == 0) first = &e;
    }
  }
  if (to != from && !common) throw FormatError(src + ": no common_state entry to record the optimizer's form in");

  // The bar counts the planned bytes as each is read for its write.
  Progress bar("reshard", sum.plan_written, opts.progress);
  DcpWriteOptions wo;
  wo.megatron = *r.megatron();
  wo.planner_data = false;
  DcpWriter w(dst, wo);
  const TorchDType& f32 = *find_torch_dtype("float32");

  // Declarations: the carried entries in source order, then the target's optimizer keys.
  for (const Entry& e : md.entries) {
    if (is_optimizer(e)) continue;
    if (e.is_tensor) w.declare_tensor(e.fqn, *e.tensor.dtype, e.tensor.size);
    else w.declare_bytes(e.fqn);
  }
  std::vector<std::string> model_keys;  // stored keys holding parameters, first-seen order
  for (const MegatronParam& p : mparams)
    if (std::find(model_keys.begin(), model_keys.end(), p.key) == model_keys.end()) model_keys.push_back(p.key);
  if (to == MegatronForm::dp_reshardable) {
    w.declare_bytes(group_object_key(group, kParamGroups));
    declare_group_buckets(w, group, sum.target, states);
  } else {
    for (const std::string& key : model_keys)
      for (const std::string& role : roles)
        w.declare_tensor(model_space_state_key(megatron_state_name(role), key), f32, r.entry(key).tensor.size);
  }

  // Carried entries, each on its source rank where the target has it.
  for (const Entry& e : md.entries) {
    if (is_optimizer(e)) continue;
    if (e.is_tensor) {
      // At model parallelism the source's ranks are kept: each holds its model-parallel rank's pieces.
      GroupWriteCount n;
      copy_tensor_chunks(w, r, e, [&](uint64_t s) { return static_cast<uint32_t>(model_parallel ? s : s % opts.dp); }, n);
      sum.chunks += n.chunks;
      sum.bytes_written += n.bytes;
      bar.advance(n.bytes);
    } else if (&e == common && to != from) {
      const std::string where = r.dir() + ": " + e.fqn;
      const Value stored = r.read_object(e);
      const Value& cs = unwrap_object(stored, where);
      // dist_checkpointing.save called directly may store no content_metadata: one is written.
      const Value* stored_content = cs.is(Kind::dict) ? cs.find("content_metadata") : nullptr;
      const Value content = stored_content && stored_content->is(Kind::dict) ? *stored_content : Value::dict({});
      // One optimizer's entry; a chained optimizer's is {N: entry of child N}, as Megatron saves it.
      auto optimizer_entry = [&](const Entry* pg_entry, const std::string& pg_group) {
        if (to == MegatronForm::dp_reshardable)
          return Value::dict({{Value::str("param_state_sharding_type"), Value::str("dp_reshardable")}});
        if (!pg_entry) throw FormatError(src + ": no '" + pg_group + ".optimizer' object holding param_groups");
        const Value pg = unwrap_object(r.read_object(*pg_entry), r.dir() + ": " + pg_entry->fqn);
        return Value::dict({{Value::str("optimizer"), pg},
                            {Value::str("param_state_sharding_type"), Value::str("fully_reshardable")}});
      };
      const Value* stored_optimizer = cs.is(Kind::dict) ? cs.find("optimizer") : nullptr;
      const bool chained = stored_optimizer && stored_optimizer->is(Kind::dict) && !stored_optimizer->entries().empty() &&
                           stored_optimizer->entries()[0].first.is(Kind::integer);
      Value optimizer;
      if (chained) {  // from dp_reshardable: a chained model-space source goes to buckets, refused above
        std::vector<std::pair<Value, Value>> children;
        for (const auto& [k, v] : stored_optimizer->entries()) {
          if (!k.is(Kind::integer)) throw FormatError(where + ": a chained optimizer's child named " + k.repr(40));
          const auto it = chained_param_groups.find(k.as_int());
          children.emplace_back(Value::integer(k.as_int()),
                                optimizer_entry(it == chained_param_groups.end() ? nullptr : it->second,
                                                "chained_" + std::to_string(k.as_int()) + "." + kFirstGroup));
        }
        optimizer = Value::dict(std::move(children));
      } else {
        optimizer = optimizer_entry(param_groups, group);
      }
      Value out = with_entry(cs, "optimizer", optimizer);
      out = with_entry(out, "content_metadata",
                       with_entry(content, kShardingTypeField, Value::str(form_name(to))));
      w.rank(0).write_object(e.fqn, wrap_object(out));
    } else {
      check_carried_object(r, e);
      auto buf = std::make_shared<std::vector<uint8_t>>(r.read_bytes(e));
      w.rank(0).write_bytes(e.fqn, buf->size(), from_buffer(buf));
      sum.bytes_written += buf->size();
      bar.advance(buf->size());
    }
  }

  if (to == MegatronForm::dp_reshardable) {
    if (param_groups) {
      check_carried_object(r, *param_groups);
      auto buf = std::make_shared<std::vector<uint8_t>>(r.read_bytes(*param_groups));
      w.rank(0).write_bytes(group_object_key(group, kParamGroups), buf->size(), from_buffer(buf));
    } else {
      const Value stored = r.read_object(*common);
      const Value& cs = unwrap_object(stored, r.dir() + ": " + common->fqn);
      const Value& pg = field(field(cs, "optimizer", common->fqn), "optimizer", common->fqn);
      w.rank(0).write_object(group_object_key(group, kParamGroups), wrap_object(pg));
    }
    // Each DP rank's file on a thread of its own.
    std::mutex sum_mu;
    for_each_group_shard({opts.dp}, [](size_t, uint32_t d) { return d; }, shard_writer_threads(opts.dp, wo.io_block_bytes),
                         [&](size_t, uint32_t d) {
      const GroupWriteCount n = write_group_buckets(
          w, group, sum.target, states, 0, [](uint32_t dd) { return dd; },
          [&](uint32_t param, const std::string& state, uint64_t begin) {
            return state_fill(source, bar, spec.params[param].name, role_of.at(state), begin);
          },
          d);
      const std::lock_guard<std::mutex> lock(sum_mu);
      sum.chunks += n.chunks;
      sum.bytes_written += n.bytes;
    });
  } else {
    // Model space: each state in its model key's shape and chunks; a stacked key's flat extent is its
    // layers' parameters one after another. At model parallelism each state chunk goes to the rank
    // file that stores its model chunk; each rank file's chunks are written by a thread of their own.
    struct StateChunk {
      const std::string* key;
      const std::string* role;
      size_t chunk;
    };
    std::map<uint32_t, std::vector<StateChunk>> by_rank;
    uint64_t largest_chunk = 0;
    for (const std::string& key : model_keys) {
      const Entry& e = r.entry(key);
      for (const std::string& role : roles)
        for (size_t ci = 0; ci < e.tensor.chunks.size(); ++ci) {
          const uint32_t rank =
              model_parallel ? static_cast<uint32_t>(storage_file_rank(r.storage(e, ci).relative_path).value_or(0)) : 0;
          by_rank[rank].push_back({&key, &role, ci});
          largest_chunk = std::max(largest_chunk, shape_volume(e.tensor.chunks[ci].sizes) * 4);
        }
    }
    std::vector<std::pair<uint32_t, const std::vector<StateChunk>*>> jobs;
    for (const auto& [rank, chunks] : by_rank) jobs.emplace_back(rank, &chunks);
    // Each key's parameters in layer order: the parts of its flat extent.
    std::map<std::string, std::vector<const MegatronParam*>> layers_of;
    for (const MegatronParam& p : mparams) layers_of[p.key].push_back(&p);
    constexpr uint64_t kRowBlockBytes = 64ull << 20;
    std::mutex sum_mu;
    ThreadPool pool(shard_writer_threads(jobs.size(), largest_chunk + kRowBlockBytes));
    pool.parallel_for(jobs.size(), [&](size_t j) {
      const uint32_t rank = jobs[j].first;
      std::vector<uint8_t> block;
      // The chunk's state, reused from chunk to chunk and never zero-filled (the rows read fill every
      // byte), lent to the writer from here.
      std::unique_ptr<uint8_t[]> held;
      uint64_t capacity = 0;
      for (const StateChunk& sc : *jobs[j].second) {
        const std::string& key = *sc.key;
        const std::string& role = *sc.role;
        const Entry& e = r.entry(key);
        const ChunkMeta& c = e.tensor.chunks[sc.chunk];
        const std::vector<const MegatronParam*>& layers = layers_of.at(key);
        const uint64_t per = e.tensor.numel() / layers.size();
        const size_t n = e.tensor.size.size();
        std::vector<uint64_t> stride(n, 1);
        for (size_t d = n; d-- > 1;) stride[d - 1] = stride[d] * e.tensor.size[d];
        const uint64_t vol = shape_volume(c.sizes);
        if (vol * 4 > capacity) {
          held.reset(new uint8_t[vol * 4]);
          capacity = vol * 4;
        }
        uint8_t* const buf = held.get();
        const uint64_t run = n ? c.sizes[n - 1] : 1, rows = run ? vol / run : 0;
        // Each row's start in the key's flat extent.
        std::vector<uint64_t> starts(rows);
        std::vector<uint64_t> idx(n ? n - 1 : 0, 0);
        for (uint64_t row = 0; row < rows; ++row) {
          uint64_t g = n ? c.offsets[n - 1] : 0;
          for (size_t d = 0; d + 1 < n; ++d) g += (c.offsets[d] + idx[d]) * stride[d];
          starts[row] = g;
          for (size_t d = idx.size(); d-- > 0;) {
            if (++idx[d] < c.sizes[d]) break;
            idx[d] = 0;
          }
        }
        // Where SRC stores each layer's part of the chunk as a piece of its own (the chunk is SRC's
        // tensor-parallel piece), the pieces are read as they are. Otherwise rows are read in blocks:
        // the range enclosing consecutive rows of one layer's parameter, up to kRowBlockBytes, in one
        // read (a chunk cut along a later axis skips the other ranks' parts of each row: read and
        // dropped, far cheaper than a read per row).
        const bool as_pieces = read_layer_pieces(source, layers, role, e.tensor.size, c, buf);
        for (uint64_t row = as_pieces ? rows : 0; row < rows;) {
          const uint64_t layer = starts[row] / per, at = starts[row] % per;
          if (at + run > per) {  // a row crossing from one layer's parameter into the next: in parts
            for (uint64_t done = 0; done < run;) {
              const uint64_t l = (starts[row] + done) / per, a = (starts[row] + done) % per;
              const uint64_t len = std::min(run - done, per - a);
              source.read(layers.at(l)->name, role, a, a + len, buf + (row * run + done) * 4);
              done += len;
            }
            ++row;
            continue;
          }
          uint64_t last = row;
          while (last + 1 < rows && starts[last + 1] / per == layer && starts[last + 1] % per + run <= per &&
                 (starts[last + 1] + run - starts[row]) * 4 <= kRowBlockBytes)
            ++last;
          const uint64_t end = starts[last] % per + run;
          if (last == row || end - at == (last - row + 1) * run) {  // the rows are one contiguous range
            source.read(layers.at(layer)->name, role, at, end, buf + row * run * 4);
          } else {
            block.resize((end - at) * 4);
            source.read(layers.at(layer)->name, role, at, end, block.data());
            for (uint64_t k = row; k <= last; ++k)
              std::memcpy(buf + k * run * 4, block.data() + (starts[k] % per - at) * 4, run * 4);
          }
          row = last + 1;
        }
        w.rank(rank).write_tensor(model_space_state_key(megatron_state_name(role), key), c.offsets, c.sizes,
                                  BorrowBytes([buf](uint64_t offset, size_t size) {
                                    return BorrowedBlock{buf + offset, size, std::nullopt};
                                  }));
        bar.advance(vol * 4);
        const std::lock_guard<std::mutex> lock(sum_mu);
        ++sum.chunks;
        sum.bytes_written += vol * 4;
      }
    });
  }
  const Metadata written = w.commit();
  sum.keys = written.entries.size();
  return sum;
}

}  // namespace fpg::dcp
