#include "formats/dcp/megatron/model_section_writer.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/printable.h"
#include "core/progress.h"
#include "core/shape.h"
#include "core/thread_pool.h"
#include "formats/dcp/blocks_ahead.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/megatron/box_fill.h"
#include "formats/dcp/megatron/bucket_writer.h"
#include "formats/dcp/megatron/megatron_parallel.h"
#include "formats/dcp/torch_dtype.h"

namespace fpg::dcp {
namespace {

using ckpt::MegatronModelParam;
using ckpt::MegatronModelSection;

constexpr const char* kLayersPrefix = "decoder.layers.";

// One item of a rank's data file: a piece of a parameter, or an object.
struct Item {
  std::string key;
  size_t param = SIZE_MAX;         // a piece: index into the section's params
  Box box;                         // the piece, in the parameter's coordinates
  std::vector<uint64_t> prepended;  // the key's prepended offsets (layer, expert)
  Value object;                    // an object item
};

struct Declared {
  bool bytes = false;  // an object's key
  DType dtype = DType::BF16;
  std::vector<uint64_t> shape;  // global
};

std::string joined(const std::vector<uint64_t>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? "." : "") + std::to_string(xs[i]);
  return s;
}

class SectionPlan {
 public:
  explicit SectionPlan(const MegatronModelSection& s) : s_(s) {
    if (!s.source) throw InternalError("model section: no source");
    if (s.tp == 0 || s.pp == 0 || s.ep == 0) throw UsageError("tp, pp and ep must be at least 1");
    const auto& ts = s.source->tensors();
    std::map<uint64_t, std::set<std::string>> layer_keys;
    for (const MegatronModelParam& p : s.params) {
      if (p.tensor >= ts.size()) throw InternalError("model section: a parameter of no tensor");
      if (p.expert && !p.layer) throw InternalError("model section: an expert outside a layer");
      if (p.layer) {
        layers_ = std::max<uint64_t>(layers_, *p.layer + 1);
        layer_keys[*p.layer].insert(p.module_key);
      }
      if (p.expert) experts_ = std::max<uint64_t>(experts_, *p.expert + 1);
    }
    for (const auto& [layer, keys] : layer_keys) stacked_ &= keys == layer_keys.begin()->second;
    if (layer_keys.size() != layers_) throw InternalError("model section: a layer without parameters");
    const std::string what = s.source->describe();
    if (layers_ == 0 ? s.pp > 1 : layers_ % s.pp != 0)
      throw UsageError(fmt::format("{}: {} layers do not split evenly over {} pipeline stages; uneven first and last "
                                   "stages are not chosen for you",
                                   what, layers_, s.pp));
    if (s.ep > 1 && experts_ == 0)
      throw UsageError(fmt::format("{}: expert parallelism {} needs experts; the model has none", what, s.ep));
    if (experts_ && experts_ % s.ep != 0)
      throw UsageError(fmt::format("{}: {} experts per MoE layer do not split over {} expert-parallel ranks", what,
                                   experts_, s.ep));
    first_layered_ = s.params.size();
    for (size_t i = 0; i < s.params.size(); ++i)
      if (s.params[i].layer) first_layered_ = std::min(first_layered_, i);
    cut_params();
  }

  bool stacked() const { return stacked_; }
  uint32_t world() const { return s_.tp * s_.ep * s_.pp; }

  // The DCP key of a module key in layer `layer` (a key outside the layers when absent).
  std::string key(const std::string& module_key, const std::optional<uint64_t>& layer) const {
    if (!layer) return module_key;
    return stacked_ ? kLayersPrefix + module_key : kLayersPrefix + std::to_string(*layer) + "." + module_key;
  }
  // The prepended offsets and sizes of a key's entry for (layer, expert).
  std::pair<std::vector<uint64_t>, std::vector<uint64_t>> prepended(const std::optional<uint64_t>& layer,
                                                                    const std::optional<uint64_t>& expert) const {
    std::vector<uint64_t> at, sizes;
    if (layer && stacked_) at.push_back(*layer), sizes.push_back(layers_);
    if (expert) at.push_back(*expert), sizes.push_back(experts_);
    return {at, sizes};
  }
  uint32_t stage(const std::optional<uint64_t>& layer, size_t index) const {
    if (layer) return static_cast<uint32_t>(*layer / (layers_ / s_.pp));
    return index < first_layered_ ? 0 : s_.pp - 1;
  }
  uint32_t expert_rank(const std::optional<uint64_t>& expert) const {
    return expert ? static_cast<uint32_t>(*expert / (experts_ / s_.ep)) : 0;
  }
  uint32_t rank(uint32_t tp, uint32_t dp, uint32_t pp) const { return tp + s_.tp * (dp + s_.ep * pp); }

  // The keys in declaration order, and every rank's items in write order.
  void plan(std::vector<std::pair<std::string, Declared>>& keys, std::vector<std::vector<Item>>& items) const {
    const auto& ts = s_.source->tensors();
    std::map<std::string, size_t> declared;
    items.assign(world(), {});
    for (size_t i = 0; i < s_.params.size(); ++i) {
      const MegatronModelParam& p = s_.params[i];
      const std::string k = key(p.module_key, p.layer);
      const auto [at, sizes] = prepended(p.layer, p.expert);
      Declared d{false, ts[p.tensor].dtype, sizes};
      d.shape.insert(d.shape.end(), ts[p.tensor].shape.begin(), ts[p.tensor].shape.end());
      const auto [it, fresh] = declared.emplace(k, keys.size());
      if (fresh) {
        keys.emplace_back(k, d);
      } else if (keys[it->second].second.shape != d.shape || keys[it->second].second.dtype != d.dtype) {
        const Declared& e = keys[it->second].second;
        throw UsageError(fmt::format("{}: {} is {} {}, where the other parameters Megatron stacks in key {} are {} {}",
                                     s_.source->describe(), quoted_name(ts[p.tensor].name), dtype_name(d.dtype),
                                     shape_string(ts[p.tensor].shape), quoted_name(k), dtype_name(e.dtype),
                                     shape_string(std::vector<uint64_t>(e.shape.begin() + at.size(), e.shape.end()))));
      }
      const uint32_t pp = stage(p.layer, i), dp = expert_rank(p.expert);
      const std::vector<Box>& chunks = cut_[i].chunks;
      for (size_t c = 0; c < chunks.size(); ++c) {
        Item item;
        item.key = k;
        item.param = i;
        item.box = chunks[c];
        item.prepended = at;
        items[rank(static_cast<uint32_t>(c % s_.tp), dp, pp)].push_back(std::move(item));
      }
    }
    for (const ckpt::MegatronExtraState& x : s_.extra_states) {
      const auto [at, sizes] = prepended(x.layer, x.expert);
      Item item;
      item.key = key(x.module_key, x.layer) + "._extra_state/shard_" + (at.empty() ? "0" : joined(at)) + "_" +
                 (sizes.empty() ? "1" : joined(sizes));
      item.object = wrap_object(Value());
      keys.emplace_back(item.key, Declared{true, DType::U8, {}});
      // A module outside the layers with an extra state is a norm after them (the final norm).
      items[rank(0, expert_rank(x.expert), stage(x.layer, s_.params.size()))].push_back(std::move(item));
    }
    Item common;
    common.key = "common_state/shard_0_1";
    common.object = wrap_object(Value::dict(
        {{Value::str("checkpoint_version"), Value::floating(3.0)},
         {Value::str("iteration"), Value::integer(0)},
         {Value::str("content_metadata"), Value::dict({{Value::str("singleton_local_shards"), Value::boolean(false)},
                                                       {Value::str("chained_optim_avoid_prefix"), Value::boolean(true)}})}}));
    keys.emplace_back(common.key, Declared{true, DType::U8, {}});
    items[0].push_back(std::move(common));
  }

  const MegatronParam& cut(size_t param) const { return cut_.at(param); }

 private:
  // Each parameter's TP pieces: Megatron's parallel linears cut from TP 1 into tp; experts alike, at
  // expert TP = TP.
  void cut_params() {
    const auto& ts = s_.source->tensors();
    std::vector<MegatronParam> whole;
    for (const MegatronModelParam& p : s_.params) {
      MegatronParam m;
      m.name = ts[p.tensor].name;
      m.key = key(p.module_key, p.layer);
      m.shape = ts[p.tensor].shape;
      m.dtype = ts[p.tensor].dtype;
      m.layer = p.layer;
      m.expert = p.expert;
      Box all{std::vector<uint64_t>(m.shape.size(), 0), m.shape};
      if (p.gated) {
        if (m.shape.empty() || m.shape[0] % 2)
          throw UsageError(s_.source->describe() + ": " + quoted_name(m.name) + " " + shape_string(m.shape) +
                           " is no gated linear_fc1: its rows are not two halves");
        Box w = all, v = all;
        w.sizes[0] = v.sizes[0] = v.offsets[0] = m.shape[0] / 2;
        m.chunks = {w, v};
      } else {
        m.chunks = {all};
      }
      whole.push_back(std::move(m));
    }
    cut_ = tensor_parallel_params(whole, 1, s_.tp, 1, s_.tp);
  }

  const MegatronModelSection& s_;
  uint64_t layers_ = 0, experts_ = 0;
  bool stacked_ = true;
  size_t first_layered_ = 0;
  std::vector<MegatronParam> cut_;
};

class ModelSectionWriter : public ckpt::MegatronModelWriter {
 public:
  ckpt::MegatronModelWriteSummary write(const MegatronModelSection& s, const std::string& dir,
                                        const ckpt::MegatronModelWriteOptions& o) const override {
    const SectionPlan plan(s);
    std::vector<std::pair<std::string, Declared>> keys;
    std::vector<std::vector<Item>> items;
    plan.plan(keys, items);
    const auto& ts = s.source->tensors();
    for (const MegatronModelParam& p : s.params)
      if (torch_dtype_name(ts[p.tensor].dtype).empty())
        throw UsageError(s.source->describe() + ": " + quoted_name(ts[p.tensor].name) + " is " +
                         std::string(dtype_name(ts[p.tensor].dtype)) + ", which torch has no dtype for");

    ckpt::MegatronModelWriteSummary sum;
    sum.stacked_layers = plan.stacked();
    uint64_t total = 0;
    for (const auto& rank : items)
      for (const Item& it : rank)
        if (it.param != SIZE_MAX) total += dtype_bytes(ts[s.params[it.param].tensor].dtype, shape_volume(it.box.sizes));
    Progress bar("import", total, o.progress);

    DcpWriteOptions wo;
    wo.megatron = megatron_torch_dist_metadata();
    wo.planner_data = false;
    if (!o.checkpoint_id.empty()) wo.checkpoint_id = o.checkpoint_id;
    DcpWriter w(dir, wo);
    for (const auto& [k, d] : keys) {
      if (d.bytes) {
        w.declare_bytes(k);
        continue;
      }
      w.declare_tensor(k, *find_torch_dtype(torch_dtype_name(d.dtype)), d.shape);
    }

    // Each rank's file is written by one thread, its items in order, their bytes read ahead by another
    // (blocks_ahead.h); ranks in parallel.
    std::atomic<uint64_t> read{0}, written{0}, chunks{0}, objects{0};
    ThreadPool::global().parallel_for(items.size(), [&](size_t r) {
      if (items[r].empty()) return;
      DcpRankWriter& rw = w.rank(static_cast<uint32_t>(r));
      uint64_t rank_read = 0;  // counted by the reading thread, read once it has stopped
      std::vector<std::pair<uint64_t, FillBytes>> pieces;
      for (const Item& it : items[r]) {
        if (it.param == SIZE_MAX) continue;
        const ckpt::ParamTensor& t = ts[s.params[it.param].tensor];
        const uint64_t elem = dtype_bytes(t.dtype, 1);
        pieces.emplace_back(elem * shape_volume(it.box.sizes),
                            box_fill(*s.source, s.params[it.param].tensor, t.shape, it.box, elem, &rank_read));
      }
      {
        BlocksAhead ahead(std::move(pieces), wo.io_block_bytes);
        size_t piece = 0;
        for (const Item& it : items[r]) {
          check_interrupt();
          if (it.param == SIZE_MAX) {
            rw.write_object(it.key, it.object);
            ++objects;
            continue;
          }
          std::vector<uint64_t> offsets = it.prepended, sizes(it.prepended.size(), 1);
          offsets.insert(offsets.end(), it.box.offsets.begin(), it.box.offsets.end());
          sizes.insert(sizes.end(), it.box.sizes.begin(), it.box.sizes.end());
          const BorrowBytes lend = ahead.item(piece++);
          rw.write_tensor(it.key, offsets, sizes, [&](uint64_t offset, size_t size) {
            const BorrowedBlock b = lend(offset, size);
            bar.advance(size);
            written += size;
            return b;
          });
          ++chunks;
        }
      }
      read += rank_read;
    });
    s.source->finish_reads();
    check_interrupt();
    const Metadata md = w.commit();
    sum.keys = md.entries.size();
    sum.chunks = chunks;
    sum.objects = objects;
    sum.bytes_read = read;
    sum.bytes_written = written;
    for (const auto& rank : items) sum.files += rank.empty() ? 0 : 1;
    return sum;
  }
};

}  // namespace

std::unique_ptr<ckpt::MegatronModelWriter> make_model_section_writer() { return std::make_unique<ModelSectionWriter>(); }

}  // namespace fpg::dcp
