#include "pipeline/fp8_params.h"

namespace fpg::pipeline {

bool is_fp8_param(const model::Param& p, const PipelineConfig& c) {
  return c.fp8.enabled && p.role == model::Role::matrix && p.is_2d() && p.dtype == DType::BF16 &&
         !p.keep_in_fp32;
}

std::vector<bool> fp8_flags(const model::ModelSpec& spec, const PipelineConfig& c) {
  if (!c.fp8.enabled) return {};
  std::vector<bool> f(spec.params.size());
  for (size_t i = 0; i < spec.params.size(); ++i) f[i] = is_fp8_param(spec.params[i], c);
  return f;
}

fp8::DelayedConfig delayed_config(const Fp8Config& c) {
  fp8::DelayedConfig d;
  d.format = c.recipe.format;
  d.history_len = c.amax_history_len;
  d.algo = c.amax_algo;
  d.margin = c.margin;
  return d;
}

bool is_delayed(const Fp8Config& c) { return c.enabled && c.recipe.scaling == fp8::Scaling::delayed; }

std::vector<Fp8Tensor> make_fp8_tensors(const model::ModelSpec& spec, const PipelineConfig& c,
                                        std::vector<Fp8ParamState>& states, std::vector<int32_t>& index) {
  std::vector<Fp8Tensor> out;
  states.clear();
  index.assign(spec.params.size(), -1);
  for (uint32_t i = 0; i < spec.params.size(); ++i) {
    const model::Param& p = spec.params[i];
    if (!is_fp8_param(p, c)) continue;
    Fp8Tensor t;
    t.param = i;
    t.state = static_cast<uint32_t>(states.size());
    t.from_master = fp8::make_plan(c.fp8.recipe, fp8::Input::f32_as_bf16, p.shape, p.name);
    t.from_bf16 = fp8::make_plan(c.fp8.recipe, fp8::Input::bf16, p.shape, p.name);
    Fp8ParamState s;
    s.param = i;
    const fp8::Plan& plan = t.from_master;
    if (c.fp8.recipe.scaling == fp8::Scaling::mxfp8) {
      s.scales.e8m0.assign(plan.grid.size(), 0);
      s.scales.e8m0_col.assign(plan.col_grid.size(), 0);
    } else {
      s.scales.scale.assign(plan.grid.size(), 1.0f);
      s.scales.scale_inv.assign(plan.grid.size(), 1.0f);
    }
    if (is_delayed(c.fp8)) {
      s.delayed = fp8::DelayedState(delayed_config(c.fp8));
      load_delayed_scales(s);
    }
    index[i] = static_cast<int32_t>(out.size());
    states.push_back(std::move(s));
    out.push_back(std::move(t));
  }
  return out;
}

uint64_t fp8_data_bytes(const fp8::Plan& p) {
  return (p.has_rowwise() ? p.numel() : 0) + (p.has_columnwise() ? p.numel() : 0);
}

void load_delayed_scales(Fp8ParamState& s) {
  s.scales.scale.assign(1, s.delayed.scale);
  s.scales.scale_inv.assign(1, s.delayed.scale_inv);
}

void record_delayed(const Fp8Config& c, Fp8ParamState& s, float amax) {
  fp8::delayed_record(s.delayed, amax);
  fp8::delayed_update(delayed_config(c), s.delayed);
}

}  // namespace fpg::pipeline
