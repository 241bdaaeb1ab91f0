#include "train/state_load.h"

#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/key_names.h"
#include "core/error.h"
#include "layout/bucketed_layout.h"
#include "pipeline/fp8_params.h"
#include "train/state_documents.h"

namespace fpg::train {
namespace {

using pipeline::OptimizerState;
using pipeline::StateFragment;

std::vector<float>& arena(OptimizerState& st, const std::string& state) {
  if (state == "master") return st.master;
  if (state == "exp_avg") return st.exp_avg;
  if (state == "exp_avg_sq") return st.exp_avg_sq;
  if (state == "momentum_buffer") return st.momentum;
  throw InternalError("checkpoint: no optimizer state named " + state);
}

struct Loader {
  const fpckpt::CheckpointReader& r;

  // Reads [lo, hi) of key `name` (of `dtype` and `numel` elements) into out.
  void read(const std::string& name, DType dtype, uint64_t numel, uint64_t lo, uint64_t hi, void* out) const {
    const long k = r.find_key(name);
    if (k < 0) throw FormatError(r.dir() + ": no key '" + name + "', which this run's state needs");
    const ckpt::Key& key = r.index().keys[static_cast<size_t>(k)];
    if (key.dtype != dtype || key.numel() != numel)
      throw FormatError(r.dir() + ": key '" + name + "' is " + std::string(dtype_name(key.dtype)) + " " +
                        shape_string(key.shape) + "; this run holds " + std::string(dtype_name(dtype)) + " of " +
                        std::to_string(numel) + " elements");
    r.read(static_cast<uint32_t>(k), lo, hi, out);
  }

  template <class T>
  void read_whole(const std::string& name, DType dtype, std::vector<T>& v) const {
    read(name, dtype, v.size(), 0, v.size(), v.data());
  }
};

}  // namespace

void load_rank_state(const fpckpt::CheckpointReader& reader, pipeline::RankPipeline& rank) {
  const Loader L{reader};
  const std::string& dir = reader.dir();
  const model::ModelSpec& spec = rank.spec();
  pipeline::RankState& rs = rank.state();

  nlohmann::json opt;
  ckpt::StateLayout sl = ckpt::StateLayout::model;
  int64_t step = 0;
  try {
    opt = nlohmann::json::parse(reader.index().documents.get(ckpt::doc::optimizer).value_or("null"));
    const auto parsed = ckpt::parse_state_layout(opt.at("state_layout").get<std::string>());
    if (!parsed) throw FormatError("state_layout is neither \"bucket\" nor \"model\"");
    sl = *parsed;
    step = opt.at("step").get<int64_t>();
  } catch (const std::exception& e) {
    throw FormatError(dir + ": document 'optimizer': " + e.what());
  }

  // Bucketed part: this rank's fragments, from the keys of the checkpoint's state layout.
  const std::vector<std::string> states = saved_states(rs.bucketed.kind);
  const layout::BucketedLayout& bl = rank.bucketed_layout();
  const std::vector<layout::RankFragment> frags = layout::rank_fragments(bl, rs.rank);
  if (frags.size() != rs.bucketed.fragments.size())
    throw InternalError("checkpoint: rank fragments do not match the optimizer state's");
  for (size_t i = 0; i < frags.size(); ++i) {
    const StateFragment& f = rs.bucketed.fragments[i];
    const layout::Fragment& lf = frags[i].fragment;
    if (lf.param != f.param || lf.param_range != f.param_range)
      throw InternalError("checkpoint: fragment " + std::to_string(i) + " does not match the layout's");
    const model::Param& p = spec.params.at(f.param);
    for (const std::string& s : states) {
      float* out = arena(rs.bucketed, s).data() + f.offset;
      if (sl == ckpt::StateLayout::model) {
        L.read(ckpt::model_state_key(p.name, s), DType::F32, p.numel(), f.param_range.begin, f.param_range.end, out);
      } else {
        const layout::Bucket& b = bl.buffers.at(frags[i].buffer).buckets.at(frags[i].bucket);
        L.read(ckpt::bucket_state_key(frags[i].buffer, frags[i].bucket, s), DType::F32, b.numel_unpadded,
               lf.world_in_bucket.begin, lf.world_in_bucket.end, out);
      }
    }
  }
  // Layer-wise matrices this rank owns: whole, always layout `model`.
  for (const StateFragment& f : rs.layer_wise.fragments) {
    const model::Param& p = spec.params.at(f.param);
    for (const std::string& s : saved_states(rs.layer_wise.kind))
      L.read(ckpt::model_state_key(p.name, s), DType::F32, p.numel(), f.param_range.begin, f.param_range.end,
             arena(rs.layer_wise, s).data() + f.offset);
  }
  // Both parts step together (a skipped step skips both).
  rs.bucketed.step = step;
  rs.layer_wise.step = rank.layer_wise_layout() ? step : 0;

  // FP8 scale state: every rank holds every param's.
  const bool delayed = pipeline::is_delayed(rank.config().fp8);
  for (pipeline::Fp8ParamState& s : rs.fp8) {
    const std::string& name = spec.params.at(s.param).name;
    if (!s.scales.scale.empty()) {
      L.read_whole(ckpt::fp8_state_key(name, "scale"), DType::F32, s.scales.scale);
      L.read_whole(ckpt::fp8_state_key(name, "scale_inv"), DType::F32, s.scales.scale_inv);
    }
    if (!s.scales.e8m0.empty()) L.read_whole(ckpt::fp8_state_key(name, "scale_e8m0"), DType::F8_E8M0, s.scales.e8m0);
    if (!s.scales.e8m0_col.empty())
      L.read_whole(ckpt::fp8_state_key(name, "columnwise_scale_e8m0"), DType::F8_E8M0, s.scales.e8m0_col);
    if (delayed) {
      L.read_whole(ckpt::fp8_state_key(name, "amax_history"), DType::F32, s.delayed.amax_history);
      std::vector<float> next(2);
      L.read_whole(ckpt::fp8_state_key(name, "delayed_scale"), DType::F32, next);
      s.delayed.scale = next[0];
      s.delayed.scale_inv = next[1];
    }
  }

  // Params: every rank holds every param whole.
  for (uint32_t p = 0; p < spec.params.size(); ++p) {
    const std::string& name = spec.params[p].name;
    const pipeline::ParamStorage st = rank.param_storage(p);
    if (!rank.is_fp8(p)) {
      L.read(ckpt::weight_key(name), st.dtype, st.numel, 0, st.numel, st.data);
      continue;
    }
    if (st.data) L.read(ckpt::fp8_data_key(name), st.dtype, st.numel, 0, st.numel, st.data);
    if (st.col) L.read(ckpt::fp8_columnwise_key(name), st.dtype, st.numel, 0, st.numel, st.col);
  }
  rank.params_loaded();
}

}  // namespace fpg::train
