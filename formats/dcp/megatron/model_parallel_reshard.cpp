#include "formats/dcp/megatron/model_parallel_reshard.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/progress.h"
#include "core/shape.h"
#include "core/printable.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/megatron/bucket_writer.h"
#include "formats/dcp/megatron/group_reshard.h"
#include "formats/dcp/megatron/megatron_common_state.h"
#include "formats/dcp/megatron/megatron_keys.h"
#include "formats/dcp/megatron/megatron_parallel.h"
#include "formats/dcp/megatron/parallel_report.h"

namespace fpg::dcp {
namespace {

// The parameter tensors by (parameter, role), and a box of one read in blocks of rows: the range
// enclosing consecutive rows of the box (up to kRowBlockBytes) in one read, the rows copied out of it
// (a box cut along a later axis skips the other ranks' parts of each row), so that memory is the box
// and one block, never the whole parameter.
class BoxReader {
 public:
  static constexpr uint64_t kRowBlockBytes = 64ull << 20;

  explicit BoxReader(const DcpParams& params) : params_(params) {
    for (size_t t = 0; t < params.tensors().size(); ++t)
      tensor_[{params.tensors()[t].param, params.tensors()[t].role}] = t;
  }

  // The element size of `param`'s tensor `role`.
  uint64_t element_bytes(const std::string& param, const std::string& role) const {
    return dtype_bytes(params_.tensors()[find(param, role)].dtype, 1);
  }

  // Box `b` of `param`'s tensor `role` (of shape `shape`), row-major, into dst.
  void read(const std::string& param, const std::string& role, const std::vector<uint64_t>& shape, const Box& b,
            uint8_t* dst) {
    const size_t t = find(param, role);
    const uint64_t elem = dtype_bytes(params_.tensors()[t].dtype, 1);
    const size_t n = shape.size();
    if (n == 0) {
      params_.read(t, 0, 1, dst);
      return;
    }
    const uint64_t run = b.sizes[n - 1];
    uint64_t rows = 1;
    for (size_t d = 0; d + 1 < n; ++d) rows *= b.sizes[d];
    std::vector<uint64_t> starts(rows);  // each row's first element in the tensor
    std::vector<uint64_t> at(n, 0);
    for (uint64_t row = 0; row < rows; ++row) {
      uint64_t flat = 0;
      for (size_t d = 0; d < n; ++d) flat = flat * shape[d] + b.offsets[d] + (d + 1 < n ? at[d] : 0);
      starts[row] = flat;
      for (size_t d = n - 1; d-- > 0;) {
        if (++at[d] < b.sizes[d]) break;
        at[d] = 0;
      }
    }
    for (uint64_t row = 0; row < rows;) {
      uint64_t last = row;
      while (last + 1 < rows && (starts[last + 1] + run - starts[row]) * elem <= kRowBlockBytes) ++last;
      const uint64_t lo = starts[row], hi = starts[last] + run;
      if (last == row || hi - lo == (last - row + 1) * run) {  // the rows are one contiguous range
        params_.read(t, lo, hi, dst + row * run * elem);
      } else {
        block_.resize((hi - lo) * elem);
        params_.read(t, lo, hi, block_.data());
        for (uint64_t k = row; k <= last; ++k)
          std::memcpy(dst + k * run * elem, block_.data() + (starts[k] - lo) * elem, run * elem);
      }
      row = last + 1;
    }
  }

 private:
  size_t find(const std::string& param, const std::string& role) const {
    const auto it = tensor_.find({param, role});
    if (it == tensor_.end())
      throw FormatError(params_.describe() + ": parameter " + quoted_name(param) + " has no " + role);
    return it->second;
  }

  const DcpParams& params_;
  std::map<std::pair<std::string, std::string>, size_t> tensor_;  // (param, role) -> tensor index
  std::vector<uint8_t> block_;
};

// A target rank's local parameters' states, gathered fragment by fragment (bucket_writer.h asks for
// each fragment once): the rows of the local parameter's pieces that hold the fragment, read from
// the whole parameter's state into one buffer, reused and never zero-filled (each gather writes
// every byte it lends), and lent to the writer from there. A parameter split over DP ranks is read
// once in all, not once per rank.
class LocalStates {
 public:
  LocalStates(const DcpParams& params, const std::map<std::string, std::string>& role_of)
      : params_(params), role_of_(role_of), boxes_(params) {}

  // Elements [a, b) of local parameter `lp`'s state `state` (4-byte elements), valid until the next call.
  const uint8_t* gather(const LocalParam& lp, const std::string& state, uint64_t a, uint64_t b) {
    const MegatronParam& whole_param = params_.megatron_params().at(lp.param);
    const std::string& role = role_of_.at(state);
    if (boxes_.element_bytes(whole_param.name, role) != 4)
      throw FormatError(params_.describe() + ": parameter " + quoted_name(whole_param.name) + "'s " + state +
                        " is not a 4-byte state");
    // Each piece's rows (slices along its first axis) that meet [a, b): together one range of the
    // local tensor, [first, last), as the pieces lie one after another in it.
    struct Rows {
      const LocalParam::Piece* piece;
      uint64_t r0, r1, row;  // rows [r0, r1) of the piece, `row` elements each
    };
    std::vector<Rows> rows;
    uint64_t first = UINT64_MAX, last = 0;
    for (const LocalParam::Piece& p : lp.pieces) {
      const uint64_t volume = shape_volume(p.box.sizes);
      const uint64_t lo = std::max(a, p.local_start), hi = std::min(b, p.local_start + volume);
      if (lo >= hi) continue;
      const uint64_t height = p.box.sizes.empty() ? 1 : p.box.sizes[0];
      const uint64_t row = height ? volume / height : 0;
      const uint64_t r0 = (lo - p.local_start) / row, r1 = (hi - p.local_start + row - 1) / row;
      rows.push_back({&p, r0, r1, row});
      first = std::min(first, p.local_start + r0 * row);
      last = std::max(last, p.local_start + r1 * row);
    }
    if (rows.empty() || first > a || last < b)
      throw InternalError(params_.describe() + ": parameter " + quoted_name(whole_param.name) + "'s local pieces do not "
                          "hold elements [" + std::to_string(a) + ", " + std::to_string(b) + ")");
    const uint64_t bytes = (last - first) * 4;
    if (bytes > capacity_) {
      local_.reset(new uint8_t[bytes]);
      capacity_ = bytes;
    }
    for (const Rows& r : rows) {
      Box box = r.piece->box;
      if (!box.sizes.empty()) {
        box.offsets[0] += r.r0;
        box.sizes[0] = r.r1 - r.r0;
      }
      boxes_.read(whole_param.name, role, whole_param.shape, box,
                  local_.get() + (r.piece->local_start + r.r0 * r.row - first) * 4);
    }
    return local_.get() + (a - first) * 4;
  }

  // The largest buffers held: a local parameter's state and a block of rows.
  static uint64_t peak_bytes(const std::vector<MegatronParam>& whole) {
    uint64_t n = 0;
    for (const MegatronParam& p : whole) n = std::max(n, shape_volume(p.shape));
    return std::min<uint64_t>(4 * n, BoxReader::kRowBlockBytes) + 4 * n;
  }

 private:
  const DcpParams& params_;
  const std::map<std::string, std::string>& role_of_;
  BoxReader boxes_;
  std::unique_ptr<uint8_t[]> local_;
  uint64_t capacity_ = 0;
};

// The layers of each of `pp` stages. With the first and/or last stage's count given, the other stages
// split the rest evenly, as Megatron's get_num_layers_to_build does with
// num_layers_in_first/last_pipeline_stage; otherwise the source's stages at its own PP, else an even
// split.
std::vector<uint64_t> target_stages(const ParallelSizes& P, uint64_t layers, uint32_t pp,
                                    const MegatronReshardOptions& opts, const std::string& src) {
  const std::optional<uint64_t>& first = opts.first_stage_layers;
  const std::optional<uint64_t>& last = opts.last_stage_layers;
  if (!first && !last) {
    if (pp == P.pp && P.stage_layers.size() == pp) return P.stage_layers;
    if (layers % pp != 0)
      throw UsageError(src + ": " + std::to_string(layers) + " layers do not split evenly over " + std::to_string(pp) +
                       " pipeline stages; give first_stage_layers and last_stage_layers as the loading run's "
                       "num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage");
    return std::vector<uint64_t>(pp, layers / pp);
  }
  if (pp < 2) throw UsageError("first_stage_layers and last_stage_layers are for several pipeline stages, not pp 1");
  uint64_t rest = layers;
  uint32_t left = pp;
  for (const std::optional<uint64_t>& n : {first, last}) {
    if (!n) continue;
    if (*n > rest)
      throw UsageError(src + ": " + std::to_string(layers) + " layers cannot give the first and last pipeline stages " +
                       std::to_string(first.value_or(0)) + " and " + std::to_string(last.value_or(0)));
    rest -= *n;
    --left;
  }
  if (left == 0 && rest != 0)
    throw UsageError(src + ": the first and last pipeline stages' " + std::to_string(*first) + " + " +
                     std::to_string(*last) + " layers are not the model's " + std::to_string(layers));
  if (left > 0 && rest % left != 0)
    throw UsageError(src + ": after the first and last stages' layers, " + std::to_string(rest) + " of the " +
                     std::to_string(layers) + " layers do not split evenly over the " + std::to_string(left) +
                     " other pipeline stages");
  std::vector<uint64_t> stages(pp, left ? rest / left : 0);
  if (first) stages.front() = *first;
  if (last) stages.back() = *last;
  return stages;
}

// The index of the first parameter of a layer (params.size() without layers): the parameters before
// it are the first stage's, those after the last layer's the last stage's.
size_t first_layered(const std::vector<MegatronParam>& params) {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].layer) return i;
  return params.size();
}

struct TargetGroup {
  bool expert = false;
  uint32_t tp = 0, pp = 0, ep = 0;  // tp: the expert TP rank of an expert group
  uint32_t dp = 1;                  // its data-parallel size (expert DP for an expert group)
  std::string prefix;
  const OptimizerGroup* source = nullptr;  // whose padding, grad dtype and param_groups it takes
  // An expert group whose source holds its experts in the dense groups: param_groups made from the
  // dense ones, marked expert-parallel.
  bool expert_groups_from_dense = false;
  std::vector<LocalParam> locals;
  layout::BucketedLayout layout;
  // The rank file of DP rank d: Megatron's rank order, tp-dp-pp for dense groups and
  // tp-ep-dp-pp for expert groups (the expert ranks taken from the data-parallel ones).
  uint32_t TP = 1, EP = 1;
  uint32_t rank_file(uint32_t d) const { return tp + TP * (expert ? ep + EP * (d + dp * pp) : d + dp * pp); }
};

// A source group's param_groups as an expert optimizer's: every group marked is_expert_parallel
// (Megatron matches saved groups to its own by such flags; the values are the dense optimizer's).
Value expert_param_groups(const Value& stored, const std::string& where) {
  const Value& state = unwrap_object(stored, where);
  const Value* groups = state.is(Value::Kind::dict) ? state.find("param_groups") : nullptr;
  if (!groups || !groups->is(Value::Kind::list))
    throw FormatError(where + ": no 'param_groups' list in " + state.repr(120));
  std::vector<Value> marked;
  for (const Value& g : groups->items()) {
    if (!g.is(Value::Kind::dict)) throw FormatError(where + ": a param group that is not a dict: " + g.repr(80));
    marked.push_back(with_entry(g, "is_expert_parallel", Value::boolean(true)));
  }
  return wrap_object(with_entry(state, "param_groups", Value::sequence(Value::Kind::list, std::move(marked))));
}

// The sizes a resumed run has, as Megatron-LM names them in its saved args.
struct RunSizes {
  uint32_t tp = 1, pp = 1, dp = 1, ep = 1, etp = 1;
  bool stages_kept = false;  // the source's stages: its uneven-stage args stand
  std::optional<uint64_t> first_stage_layers, last_stage_layers;
};

// Megatron-LM's saved args (an argparse.Namespace) with the parallel sizes of the target run, so that
// its load (megatron/training/checkpointing.py) finds the checkpoint's TP x PP the run's, as a
// dp_reshardable optimizer state requires; and no_save_rng set: the source's RNG states are per
// (PP, TP) rank of its own layout, so the resumed run seeds afresh, as with --no-load-rng. Only the
// sizes the args hold are rewritten.
Value with_run_sizes(const Value& args, const RunSizes& run, const std::string& where) {
  if (!args.is(Value::Kind::object) || args.name() != "argparse.Namespace" || !args.state().is(Value::Kind::dict))
    throw FormatError(where + ": args is " + args.repr(60) + ", not an argparse.Namespace");
  auto integer = [](uint64_t v) { return Value::integer(static_cast<int64_t>(v)); };
  auto maybe = [&](const std::optional<uint64_t>& v) { return v ? integer(*v) : Value(); };
  const std::vector<std::pair<const char*, Value>> sizes = {
      {"tensor_model_parallel_size", integer(run.tp)},
      {"pipeline_model_parallel_size", integer(run.pp)},
      {"data_parallel_size", integer(run.dp)},
      {"world_size", integer(uint64_t{run.tp} * run.pp * run.dp)},
      {"expert_model_parallel_size", integer(run.ep)},
      {"expert_tensor_parallel_size", integer(run.etp)},
      {"decoder_first_pipeline_num_layers", maybe(run.first_stage_layers)},
      {"decoder_last_pipeline_num_layers", maybe(run.last_stage_layers)}};
  Value state = args.state();
  for (const auto& [name, value] : sizes) {
    const std::string n = name;
    const Value* v = state.find(n);
    if (!v || (n == "expert_tensor_parallel_size" && v->is_none()) ||
        (run.stages_kept && n.rfind("decoder_", 0) == 0))
      continue;
    state = with_entry(state, n, value);
  }
  state = with_entry(state, "no_save_rng", Value::boolean(true));
  return Value::object(args.name(), args.args(), std::move(state), true);
}

// The common state for the target: a MoE's optimizer entry in the target's form (a chained
// optimizer's {0: dense, 1: expert} or one optimizer's, as a MoE at EP 1, whose experts join the dense
// buffers, has), from the source's own form; Megatron-LM's saved args with the target's sizes.
Value common_for(const Value& stored, bool moe, bool chained, const RunSizes& run, const std::string& where) {
  Value cs = unwrap_object(stored, where);
  if (moe) {
    const Value* optimizer = cs.is(Value::Kind::dict) ? cs.find("optimizer") : nullptr;
    if (!optimizer || !optimizer->is(Value::Kind::dict))
      throw FormatError(where + ": no 'optimizer' entry in the common state");
    const std::vector<std::pair<Value, Value>>& entries = optimizer->entries();
    const bool was_chained = !entries.empty() && entries[0].first.is(Value::Kind::integer);
    if (was_chained && !chained) cs = with_entry(cs, "optimizer", entries[0].second);
    if (!was_chained && chained)
      cs = with_entry(cs, "optimizer", Value::dict({{Value::integer(0), *optimizer}, {Value::integer(1), *optimizer}}));
  }
  if (const Value* args = cs.is(Value::Kind::dict) ? cs.find("args") : nullptr; args && !args->is_none())
    cs = with_entry(cs, "args", with_run_sizes(*args, run, where));
  return wrap_object(std::move(cs));
}

// Where a parameter's piece lies in its stored key: the stacked layer axis, then the expert axis.
std::vector<uint64_t> key_prefix(const MegatronParam& p) {
  std::vector<uint64_t> prefix;
  if (p.layer && is_stacked_key(p.key)) prefix.push_back(*p.layer);
  if (p.expert) prefix.push_back(*p.expert);
  return prefix;
}

// The bucket numel of every buffer of every group: where the buckets are cut.
std::vector<std::vector<uint64_t>> bucket_cuts(const std::vector<layout::BucketedLayout>& layouts) {
  std::vector<std::vector<uint64_t>> cuts;
  for (const layout::BucketedLayout& l : layouts)
    for (const layout::Buffer& b : l.buffers) {
      cuts.emplace_back();
      for (const layout::Bucket& k : b.buckets) cuts.back().push_back(k.numel_unpadded);
    }
  return cuts;
}

}  // namespace

MegatronReshardSummary reshard_model_parallel(const Reader& r, const DcpParams& params,
                                              const std::vector<std::string>& states,
                                              const std::map<std::string, std::string>& role_of,
                                              const MegatronReshardOptions& opts, const std::string& dst) {
  if (!params.parallel()) throw UsageError(r.dir() + ": the optimizer groups give no parallel sizes to reshard from");
  const ParallelSizes& P = *params.parallel();
  const bool moe = params.experts() > 0;
  const uint32_t TP = opts.tp.value_or(P.tp), PP = opts.pp.value_or(P.pp), DP = opts.dp;
  const uint32_t EP = opts.ep.value_or(P.ep);
  if (P.cp > 1)
    throw UsageError(r.dir() + " was saved at " + parallel_sizes_string(P) +
                     "; reshard --tp/--pp/--ep rewrites the buckets of runs without context parallelism "
                     "(--to fully_reshardable writes the model-space form Megatron-Core loads at any parallelism)");
  if (!moe && EP != 1)
    throw UsageError(r.dir() + " holds no MoE experts: ep sets the expert-parallel size of a MoE model");
  if (moe && P.expert_tp != P.tp)
    throw UsageError(r.dir() + " was saved at expert TP " + std::to_string(P.expert_tp) + " and TP " +
                     std::to_string(P.tp) + "; reshard writes MoE models at expert TP = TP (Megatron's default)");
  // Megatron's expert TP defaults to the TP; its expert-parallel ranks are taken from the
  // data-parallel ones (expert DP = TP x DP / (expert TP x EP)).
  const uint32_t ETP = TP;
  if (moe && params.experts() % EP != 0)
    throw UsageError(r.dir() + ": " + std::to_string(params.experts()) + " experts per MoE layer do not divide over " +
                     std::to_string(EP) + " expert-parallel ranks");
  if (moe && DP % EP != 0)
    throw UsageError("an expert-parallel size " + std::to_string(EP) + " needs a data-parallel size that is a multiple "
                     "of it (Megatron takes the expert-parallel ranks from the data-parallel ones), not " +
                     std::to_string(DP));
  const uint32_t EDP = moe ? DP / EP : 1;
  // At EP 1 (expert TP = TP) Megatron registers the experts as dense parameters: one optimizer, no
  // chained_N. prefix; at EP > 1 a chained dense (chained_0) and expert (chained_1) optimizer.
  const bool chained = moe && EP > 1;
  const std::optional<MegatronCommonState> common_state = read_common_state(r);
  const bool saved_args = common_state && !common_state->args.empty();

  // The target ranks' local parameters.
  const std::vector<MegatronParam>& whole = params.megatron_params();
  const std::vector<MegatronParam> cut = tensor_parallel_params(whole, P.tp, TP, P.expert_tp, ETP);
  const ParallelModel target_model(cut);
  const std::vector<uint64_t> stages = target_stages(P, target_model.layers(), PP, opts, r.dir());
  std::vector<TargetGroup> targets;
  uint64_t first = 0;
  for (uint32_t pp = 0; pp < PP; ++pp) {
    // The source stage holding the same part of the model: the first and the last stage the
    // source's own, a middle one the stage holding its first layer.
    uint32_t source_pp = pp == 0 ? 0 : P.pp - 1;
    if (pp > 0 && pp + 1 < PP) {
      uint64_t lo = 0;
      for (uint32_t s = 0; s < P.stage_layers.size(); ++s) {
        if (first >= lo && first < lo + P.stage_layers[s]) source_pp = s;
        lo += P.stage_layers[s];
      }
    }
    const OptimizerGroup* dense_source = nullptr;
    const OptimizerGroup* expert_source = nullptr;
    for (const OptimizerGroup& g : params.groups()) {
      if (!g.expert && g.tp == 0 && g.pp == source_pp) dense_source = &g;
      if (g.expert && g.tp == 0 && g.ep == 0 && g.pp == source_pp) expert_source = &g;
    }
    if (!dense_source)
      throw InternalError(r.dir() + ": no optimizer group at TP rank 0, PP rank " + std::to_string(source_pp));
    for (uint32_t tp = 0; tp < TP; ++tp) {
      TargetGroup t;
      t.tp = tp;
      t.pp = pp;
      t.dp = DP;
      t.TP = TP;
      t.source = dense_source;
      t.locals = target_model.dense_rank(tp, first, stages[pp], pp == 0, pp + 1 == PP,
                                         moe && !chained ? std::optional<ExpertOrder>(P.expert_order) : std::nullopt);
      t.prefix = group_name(tp + TP * pp, chained ? std::optional<uint32_t>(0) : std::nullopt);
      targets.push_back(std::move(t));
    }
    for (uint32_t ep = 0; chained && ep < EP; ++ep)
      for (uint32_t etp = 0; etp < ETP; ++etp) {
        TargetGroup t;
        t.expert = true;
        t.tp = etp;
        t.ep = ep;
        t.pp = pp;
        t.dp = EDP;
        t.TP = ETP;
        t.EP = EP;
        t.source = expert_source ? expert_source : dense_source;
        t.expert_groups_from_dense = !expert_source;
        t.locals = target_model.expert_rank(etp, ep, EP, first, stages[pp], P.expert_order);
        if (t.locals.empty())
          throw UsageError(r.dir() + ": pipeline stage " + std::to_string(pp) + " of " + std::to_string(PP) +
                           " holds no MoE layer; reshard writes a chained dense and expert optimizer (EP > 1) only "
                           "where every stage has experts");
        t.prefix = group_name(etp + ETP * (ep + EP * pp), 1);
        targets.push_back(std::move(t));
      }
    first += stages[pp];
  }

  // Each group's buffers, laid out with `bucket_size` and the source's padding and grad dtype.
  auto lay_out = [&](const std::optional<uint64_t>& bucket_size) {
    std::vector<layout::BucketedLayout> out;
    for (const TargetGroup& t : targets) {
      const layout::BucketedLayout& S = t.source->layout.layout;
      layout::BucketedOptions lo;
      lo.dp = t.dp;
      lo.bucket_size = bucket_size;
      lo.pad_for_nccl = opts.pad_for_nccl.value_or(S.pad_for_nccl);
      lo.grad_reduce_in_fp32 = std::all_of(S.buffers.begin(), S.buffers.end(),
                                           [](const layout::Buffer& b) { return b.key.grad_dtype == DType::F32; });
      std::vector<MegatronParam> local_params;
      for (const LocalParam& lp : t.locals) local_params.push_back(lp.local);
      if (std::any_of(t.locals.begin(), t.locals.end(), [](const LocalParam& p) { return p.local.own_bucket; }))
        for (const LocalParam& p : t.locals) lo.own_bucket.push_back(p.local.own_bucket);
      out.push_back(layout::build_bucketed_layout(megatron_spec(local_params), lo));
    }
    return out;
  };
  // The bucket size. The source's buckets give it only as a range (every size in (lo, hi] cuts its
  // buffers alike; with one bucket per buffer, any size from the largest buffer up, or none), and at
  // other local shapes two sizes of that range can cut the buckets apart: then the run's own setting
  // must be given, never guessed.
  std::vector<layout::BucketedLayout> layouts;
  if (opts.bucket_size) {
    layouts = lay_out(*opts.bucket_size);
  } else {
    std::optional<uint64_t> lo, hi;
    uint64_t largest = 0;
    for (const OptimizerGroup& g : params.groups()) {
      if (g.layout.bucket_size_lo) lo = std::max(lo.value_or(0), *g.layout.bucket_size_lo);
      if (g.layout.bucket_size_hi) hi = std::min(hi.value_or(UINT64_MAX), *g.layout.bucket_size_hi);
      for (const layout::Buffer& b : g.layout.layout.buffers) largest = std::max(largest, b.numel);
    }
    const std::optional<uint64_t> low = lo ? *lo + 1 : largest;
    const std::optional<uint64_t> high = lo ? hi : std::nullopt;
    layouts = lay_out(low);
    const std::vector<layout::BucketedLayout> other = lay_out(high);
    if (bucket_cuts(layouts) != bucket_cuts(other))
      throw UsageError(r.dir() + ": its buckets give the bucket size only as " +
                       (lo ? "(" + std::to_string(*lo) + ", " + (hi ? std::to_string(*hi) : std::string("inf")) + "]"
                           : "at least " + std::to_string(largest) + " elements, or none") +
                       ", and at the target's local parameters sizes in that range cut the buckets differently; give "
                       "bucket_size N or none as the Megatron run that loads the checkpoint is configured");
    if (!lo) layouts = other;  // one bucket per buffer, as the source's
  }
  MegatronReshardSummary sum;
  sum.source_form = sum.target_form = "dp_reshardable";
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i].layout = std::move(layouts[i]);
    note_padding_only_ranks(targets[i].layout, sum);
  }
  sum.target = targets.front().layout;
  sum.groups = static_cast<uint32_t>(targets.size());

  const Metadata& md = r.metadata();
  auto is_optimizer = [&](const Entry& e) { return is_replaced_optimizer_entry(e, params.groups()); };
  uint64_t optimizer_bytes = 0;
  for (const TargetGroup& t : targets) optimizer_bytes += bucket_state_bytes(t.layout, states.size());
  add_plan_figures(r, is_optimizer, optimizer_bytes, sum);
  size_t jobs = 0;
  for (const TargetGroup& t : targets) jobs += t.dp;
  const uint64_t per_job = LocalStates::peak_bytes(whole);
  const size_t threads = shard_writer_threads(jobs, per_job);
  sum.plan_peak = std::max(sum.plan_peak, per_job * threads);
  if (opts.dry_run) return sum;

  // The bar counts the planned bytes as each is read for its write.
  Progress bar("reshard", sum.plan_written, opts.progress);
  DcpWriteOptions wo;
  wo.megatron = *r.megatron();
  wo.planner_data = false;
  DcpWriter w(dst, wo);
  declare_carried_entries(w, md, is_optimizer);
  for (const TargetGroup& t : targets) {
    w.declare_bytes(group_object_key(t.prefix, kParamGroups));
    declare_group_buckets(w, t.prefix, t.layout, states);
  }

  // The model keys in the target's pieces, as Megatron at the target sizes stores them: per layer
  // (and expert) the main replica of each TP piece, on the file of the rank holding it (its TP rank,
  // DP rank 0, its stage; an expert's EP rank at EP > 1).
  std::vector<uint32_t> stage_of_layer;
  for (uint32_t pp = 0; pp < PP; ++pp) stage_of_layer.insert(stage_of_layer.end(), stages[pp], pp);
  const uint64_t experts_per_rank = moe ? params.experts() / EP : 1;
  std::set<std::string> model_keys;
  BoxReader weights(params);
  for (size_t i = 0; i < cut.size(); ++i) {
    const MegatronParam& p = cut[i];
    model_keys.insert(p.key);
    const uint32_t pp = p.layer ? stage_of_layer.at(*p.layer) : (i < first_layered(cut) ? 0 : PP - 1);
    const uint32_t T = p.expert ? ETP : TP;
    const std::vector<uint64_t> prefix = key_prefix(p);
    for (size_t c = 0; c < p.chunks.size(); ++c) {
      const Box& box = p.chunks[c];
      const uint32_t tp = static_cast<uint32_t>(c % T);  // a gated fc1: [w_0 … w_{T-1}, v_0 … v_{T-1}]
      const uint32_t rank = p.expert && chained
                                ? tp + ETP * (static_cast<uint32_t>(*p.expert / experts_per_rank) + EP * EDP * pp)
                                : tp + TP * DP * pp;
      const uint64_t elem = weights.element_bytes(whole[i].name, "weight");
      auto piece = std::make_shared<std::vector<uint8_t>>(shape_volume(box.sizes) * elem);
      weights.read(whole[i].name, "weight", p.shape, box, piece->data());
      std::vector<uint64_t> offsets = prefix, sizes(prefix.size(), 1);
      offsets.insert(offsets.end(), box.offsets.begin(), box.offsets.end());
      sizes.insert(sizes.end(), box.sizes.begin(), box.sizes.end());
      w.rank(rank).write_tensor(p.key, offsets, sizes, from_buffer(piece));
      ++sum.chunks;
      sum.bytes_written += piece->size();
      bar.advance(piece->size());
    }
  }

  // Carried entries: any other tensor's chunk moves from the source rank (tp, dp, pp) to a target
  // rank's file; the common state's optimizer entry takes the target's form (chained or not).
  const uint32_t TP0 = P.tp, PP0 = P.pp;
  uint32_t DP0 = 1;
  for (const OptimizerGroup& g : params.groups())
    if (!g.expert) DP0 = std::max(DP0, g.dp);
  for (const Entry& e : md.entries) {
    if (is_optimizer(e) || model_keys.count(e.fqn)) continue;
    if (e.is_tensor) {
      GroupWriteCount n;
      copy_tensor_chunks(w, r, e, [&](uint64_t s) {
        const uint64_t tp = s % TP0, dp = (s / TP0) % DP0, pp = (s / (uint64_t{TP0} * DP0)) % PP0;
        return static_cast<uint32_t>(tp % TP + TP * (dp % DP + DP * (pp % PP)));
      }, n);
      sum.chunks += n.chunks;
      sum.bytes_written += n.bytes;
      bar.advance(n.bytes);
    } else if ((moe || saved_args) && e.fqn.rfind(kCommonStatePrefix, 0) == 0) {
      const RunSizes run{TP, PP, DP, EP, ETP, PP == P.pp && stages == P.stage_layers, opts.first_stage_layers,
                         opts.last_stage_layers};
      w.rank(0).write_object(e.fqn, common_for(r.read_object(e), moe, chained, run, r.dir() + ": " + e.fqn));
    } else {
      auto buf = std::make_shared<std::vector<uint8_t>>(r.read_bytes(e));
      w.rank(0).write_bytes(e.fqn, buf->size(), from_buffer(buf));
      sum.bytes_written += buf->size();
      bar.advance(buf->size());
    }
  }

  // Each DP rank of each group on a thread of its own (its file is its alone), gathering its local
  // parameters' states itself.
  std::mutex sum_mu;
  std::vector<uint32_t> dps;
  for (const TargetGroup& t : targets) dps.push_back(t.dp);
  for_each_group_shard(dps, [&](size_t i, uint32_t d) { return targets[i].rank_file(d); }, threads, [&](size_t i, uint32_t d) {
    const TargetGroup& t = targets[i];
    if (d == 0) {
      const Entry& pg = group_param_groups(r, t.source->prefix);
      if (t.expert_groups_from_dense) {
        w.rank(t.rank_file(0)).write_object(group_object_key(t.prefix, kParamGroups),
                                            expert_param_groups(r.read_object(pg), r.dir() + ": " + pg.fqn));
      } else {
        auto pg_bytes = std::make_shared<std::vector<uint8_t>>(r.read_bytes(pg));
        w.rank(t.rank_file(0)).write_bytes(group_object_key(t.prefix, kParamGroups), pg_bytes->size(),
                                           from_buffer(pg_bytes));
      }
    }
    LocalStates local_states(params, role_of);
    const GroupWriteCount n = write_group_buckets(
        w, t.prefix, t.layout, states, t.rank_file(0), [&](uint32_t dd) { return t.rank_file(dd); },
        [&](uint32_t param, const std::string& state, uint64_t begin, uint64_t end) {
          const uint8_t* data = local_states.gather(t.locals.at(param), state, begin, end);
          return BorrowBytes([data, &bar](uint64_t offset, size_t size) {
            bar.advance(size);
            return BorrowedBlock{data + offset, size, std::nullopt};
          });
        },
        d);
    const std::lock_guard<std::mutex> lock(sum_mu);
    sum.chunks += n.chunks;
    sum.bytes_written += n.bytes;
  });
  params.finish_reads();
  const Metadata written = w.commit();
  sum.keys = written.entries.size();
  return sum;
}

}  // namespace fpg::dcp
