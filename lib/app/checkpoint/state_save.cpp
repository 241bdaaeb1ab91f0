#include "app/checkpoint/state_save.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "fp8/recipe.h"
#include "ckpt/layout_save.h"
#include "pipeline/fp8_params.h"
#include "app/checkpoint/state_documents.h"

namespace fpg::app::checkpoint {
namespace {

using pipeline::OptimizerState;
using pipeline::StateFragment;

const std::vector<float>& arena(const OptimizerState& st, const std::string& state) {
  if (state == "master") return st.master;
  if (state == "exp_avg") return st.exp_avg;
  if (state == "exp_avg_sq") return st.exp_avg_sq;
  if (state == "momentum_buffer") return st.momentum;
  throw InternalError("checkpoint: no optimizer state named " + state);
}

ckpt::KeyKind state_kind(const std::string& state) {
  return state == "master" ? ckpt::KeyKind::master : ckpt::KeyKind::optimizer_state;
}

// The fragment of `param` holding [lo, lo + n) (the saver asks within one fragment).
const StateFragment& fragment_of(const OptimizerState& st, uint32_t param, uint64_t lo, uint64_t n) {
  const StateFragment* f = st.find(param, lo);
  if (!f || lo + n > f->param_range.end)
    throw InternalError("checkpoint: param #" + std::to_string(param) + " [" + std::to_string(lo) + ", " +
                        std::to_string(lo + n) + ") is not one fragment of this rank");
  return *f;
}

// The param's weights over [lo, hi): its data (and MXFP8 columnwise data) as held.
void write_weights(ckpt::StateWriter& w, const RankStateAccess& rank, uint32_t param, layout::Range r) {
  const model::Param& p = rank.spec().params.at(param);
  const pipeline::ParamStorage s = rank.param_storage(param);
  const size_t elem = dtype_bits(s.dtype) / 8;
  if (!rank.is_fp8(param)) {
    const uint32_t k = w.declare({ckpt::weight_key(p.name), s.dtype, p.shape, ckpt::KeyKind::weight});
    w.write_borrowed(k, r.begin, s.data + r.begin * elem, r.size());
    return;
  }
  if (s.data) {
    const uint32_t k = w.declare({ckpt::fp8_data_key(p.name), s.dtype, p.shape, ckpt::KeyKind::fp8_data});
    w.write_borrowed(k, r.begin, s.data + r.begin, r.size());
  }
  if (s.col) {
    const uint32_t k = w.declare({ckpt::fp8_columnwise_key(p.name), s.dtype, p.shape, ckpt::KeyKind::fp8_data});
    w.write_borrowed(k, r.begin, s.col + r.begin, r.size());
  }
}

template <class T>
void write_small(ckpt::StateWriter& w, const std::string& name, DType dtype, std::vector<uint64_t> shape,
                 const std::vector<T>& v) {
  const ckpt::Key key{name, dtype, std::move(shape), ckpt::KeyKind::fp8_scale};
  if (key.numel() != v.size())
    throw InternalError("checkpoint: " + name + " holds " + std::to_string(v.size()) + " values, its grid " +
                        std::to_string(key.numel()));
  w.write(w.declare(key), 0, v.data(), v.size());
}

void write_fp8_state(ckpt::StateWriter& w, const RankStateAccess& rank, const pipeline::Fp8ParamState& s) {
  const model::Param& p = rank.spec().params.at(s.param);
  const pipeline::PipelineConfig& c = rank.config();
  const fp8::Plan plan = fp8::make_plan(c.fp8.recipe, fp8::Input::f32_as_bf16, p.shape, p.name);
  const std::vector<uint64_t> grid = {plan.grid.rows, plan.grid.cols}, col = {plan.col_grid.rows, plan.col_grid.cols};
  if (!s.scales.scale.empty()) {
    write_small(w, ckpt::fp8_state_key(p.name, "scale"), DType::F32, grid, s.scales.scale);
    write_small(w, ckpt::fp8_state_key(p.name, "scale_inv"), DType::F32, grid, s.scales.scale_inv);
  }
  if (!s.scales.e8m0.empty()) write_small(w, ckpt::fp8_state_key(p.name, "scale_e8m0"), DType::F8_E8M0, grid, s.scales.e8m0);
  if (!s.scales.e8m0_col.empty())
    write_small(w, ckpt::fp8_state_key(p.name, "columnwise_scale_e8m0"), DType::F8_E8M0, col, s.scales.e8m0_col);
  if (pipeline::is_delayed(c.fp8)) {
    const auto& h = s.delayed.amax_history;
    write_small(w, ckpt::fp8_state_key(p.name, "amax_history"), DType::F32, {h.size()}, h);
    write_small(w, ckpt::fp8_state_key(p.name, "delayed_scale"), DType::F32, {2},
                std::vector<float>{s.delayed.scale, s.delayed.scale_inv});
  }
}

}  // namespace

void save_rank_state(ckpt::StateWriter& w, const pipeline::RankPipeline& rank, const RankSaveOptions& o) {
  save_rank_state(w, PipelineAccess(rank), o);
}

void save_rank_state(ckpt::StateWriter& w, const RankStateAccess& rank, const RankSaveOptions& o) {
  const pipeline::RankState& rs = rank.state();
  if (w.rank() != rs.rank)
    throw InternalError("checkpoint: writer of rank " + std::to_string(w.rank()) + " for rank " + std::to_string(rs.rank));
  const model::ModelSpec& spec = rank.spec();

  // Bucketed part: the layout decides keys and padding.
  ckpt::StateSaveOptions so;
  so.layout = o.layout;
  so.piece_elems = o.piece_elems;
  for (const std::string& s : saved_states(rs.bucketed.kind)) so.states.push_back(s);
  // The state outlives the writer (the caller finishes it before the rank goes on): borrowed, not
  // copied, here and below.
  ckpt::save_optimizer_state_borrowed(w, spec, rank.bucketed_layout(), so,
                                        [&](uint32_t param, const std::string& state, uint64_t lo, uint64_t n) {
                                          const StateFragment& f = fragment_of(rs.bucketed, param, lo, n);
                                          const float* a = arena(rs.bucketed, state).data() + f.offset;
                                          return a + (lo - f.param_range.begin);
                                        });

  // Layer-wise part: the matrices this rank owns, whole, straight from the arenas.
  const std::vector<std::string> matrix_states = saved_states(rs.layer_wise.kind);
  for (const StateFragment& f : rs.layer_wise.fragments) {
    const model::Param& p = spec.params.at(f.param);
    for (const std::string& s : matrix_states) {
      const uint32_t k = w.declare({ckpt::model_state_key(p.name, s), DType::F32, p.shape, state_kind(s)});
      w.write_borrowed(k, f.param_range.begin, arena(rs.layer_wise, s).data() + f.offset, f.param_range.size());
    }
  }

  // Weights over the same ranges; FP8 scale state by the owner of element 0.
  for (const OptimizerState* st : {&rs.bucketed, &rs.layer_wise})
    for (const StateFragment& f : st->fragments) write_weights(w, rank, f.param, f.param_range);
  for (const pipeline::Fp8ParamState& s : rs.fp8)
    if (rs.bucketed.find(s.param, 0) || rs.layer_wise.find(s.param, 0)) write_fp8_state(w, rank, s);
}

}  // namespace fpg::app::checkpoint
