#include "pipeline/layer_wise_part.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/float_codec.h"
#include "fp8/batch.h"
#include "pipeline/byte_append.h"

namespace fpg::pipeline {
namespace {

float* or_null(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
uint8_t* or_null(std::vector<uint8_t>& v) { return v.empty() ? nullptr : v.data(); }

void compute_into(const fp8::Plan& p, const float* amax, const float* amax_col, fp8::Scales& s) {
  fp8::compute_scales(p, amax, amax_col, or_null(s.scale), or_null(s.scale_inv), or_null(s.e8m0),
                      or_null(s.e8m0_col));
}

}  // namespace

LayerWisePart::LayerWisePart(const model::ModelSpec& spec, const layout::LayerWiseLayout& layout,
                             const PipelineConfig& cfg, comm::Communicator& comm, OptimizerState& state,
                             std::vector<Fp8ParamState>& fp8_states, const std::vector<Fp8Tensor>& fp8,
                             const std::vector<int32_t>& fp8_index, ThreadPool& pool)
    : spec_(spec), cfg_(cfg), comm_(comm), st_(state), fp8_states_(fp8_states), fp8_(fp8), pool_(pool) {
  const uint32_t dp = layout.dp, rank = static_cast<uint32_t>(comm_.rank());
  if (dp != static_cast<uint32_t>(comm_.size())) throw InternalError("pipeline: layer-wise layout for another dp");
  LayerWiseMatrices placed = place_layer_wise_matrices(layout, cfg_, fp8_, fp8_index);
  mats_ = std::move(placed.mats);
  matrix_of_.assign(spec_.params.size(), -1);
  for (uint32_t i = 0; i < mats_.size(); ++i) matrix_of_[mats_[i].param] = static_cast<int32_t>(i);
  bf16_bytes_ = std::move(placed.bf16_bytes);
  f32_bytes_ = std::move(placed.f32_bytes);
  fp8_bytes_ = std::move(placed.fp8_bytes);
  amax_bytes_ = std::move(placed.amax_bytes);
  grad_.assign(placed.grad_n, 0.0f);
  bf16_xfer_.assign(placed.bf16_n, 0);
  f32_xfer_.assign(placed.f32_n, 0.0f);
  amax_xfer_.assign(placed.amax_xfer_n, 0.0f);
  amax_.assign(placed.amax_n, 0.0f);
  if (placed.fp8_n) {
    const fp8::Recipe& r = cfg_.fp8.recipe;
    const bool mx = r.scaling == fp8::Scaling::mxfp8;
    if (!mx || r.mx_rowwise) fp8_data_.assign(placed.fp8_n, 0);
    if (mx && r.mx_columnwise) fp8_col_.assign(placed.fp8_n, 0);
  }

  // The owner's state: whole matrices, registration order.
  st_.fragments.clear();
  st_.by_param.clear();
  for (uint32_t i = 0; i < mats_.size(); ++i) {
    Matrix& m = mats_[i];
    if (m.owner != rank) continue;
    m.frag = static_cast<int32_t>(st_.add(m.param, layout::Range{0, m.numel}, m.numel));
    owned_.push_back(i);
  }
  st_.allocate();
}

float* LayerWisePart::grad_of(uint32_t param) {
  return grad_.data() + mats_[static_cast<size_t>(matrix_of_[param])].grad_off;
}

Transport LayerWisePart::transport(uint32_t param) const {
  return mats_[static_cast<size_t>(matrix_of_[param])].transport;
}

void LayerWisePart::materialize(uint32_t param, float* out) const {
  const Matrix& m = mats_[static_cast<size_t>(matrix_of_[param])];
  if (m.fp8 >= 0) {
    const fp8::Plan& p = tensor(m).from_master;
    const bool row = p.has_rowwise();
    fp8::dequantize_fragment(p, fstate(m).scales.view(), 0, m.numel,
                             (row ? fp8_data_.data() : fp8_col_.data()) + m.data_off, out, !row);
  } else if (m.transport == Transport::f32) {
    std::memcpy(out, f32_xfer_.data() + m.xfer_off, m.numel * 4);
  } else {
    for (uint64_t k = 0; k < m.numel; ++k) out[k] = float_from_bf16(bf16_xfer_[m.xfer_off + k]);
  }
}

ParamStorage LayerWisePart::storage(uint32_t param) {
  const Matrix& m = mats_[static_cast<size_t>(matrix_of_[param])];
  ParamStorage out;
  out.numel = m.numel;
  if (m.fp8 >= 0) {
    // Staged FP8 matrices also pass through bf16_xfer_, but only within a step: the bytes are here.
    out.dtype = fp8_dtype(cfg_.fp8.recipe.format);
    out.data = fp8_data_.empty() ? nullptr : fp8_data_.data() + m.data_off;
    out.col = fp8_col_.empty() ? nullptr : fp8_col_.data() + m.data_off;
  } else if (m.transport == Transport::f32) {
    out.dtype = DType::F32;
    out.data = reinterpret_cast<uint8_t*>(f32_xfer_.data() + m.xfer_off);
  } else {
    out.dtype = DType::BF16;
    out.data = reinterpret_cast<uint8_t*>(bf16_xfer_.data() + m.xfer_off);
  }
  return out;
}

std::vector<uint8_t> LayerWisePart::stored_bytes(uint32_t param) const {
  const Matrix& m = mats_[static_cast<size_t>(matrix_of_[param])];
  std::vector<uint8_t> out;
  if (m.fp8 >= 0) {
    if (!fp8_data_.empty()) append_bytes(out, fp8_data_.data() + m.data_off, m.numel);
    if (!fp8_col_.empty()) append_bytes(out, fp8_col_.data() + m.data_off, m.numel);
    const Fp8ParamState& st = fstate(m);
    append_fp8_state(out, st);
  } else if (m.transport == Transport::f32) {
    append_bytes(out, f32_xfer_.data() + m.xfer_off, m.numel * 4);
  } else {
    append_bytes(out, bf16_xfer_.data() + m.xfer_off, m.numel * 2);
  }
  return out;
}

void LayerWisePart::all_reduce(std::vector<comm::WorkPtr>& works) {
  works.push_back(comm_.all_reduce(grad_.data(), grad_.size(), DType::F32, comm::ReduceOp::sum));
}

void LayerWisePart::scale_grads(float divisor, GradNorm& n) {
  for (uint32_t i : owned_) {
    float* g = grad_.data() + mats_[i].grad_off;
    n.local_max = divide_and_max_abs(g, mats_[i].numel, divisor, n.local_max);
  }
}

void LayerWisePart::add_squares(GradNorm& n) const {
  for (uint32_t i : owned_)
    add_scaled_squares(grad_.data() + mats_[i].grad_off, mats_[i].numel, n.exponent, n.local_sum);
}

void LayerWisePart::clip(float coef) {
  for (uint32_t i : owned_) {
    float* g = grad_.data() + mats_[i].grad_off;
    for (uint64_t k = 0; k < mats_[i].numel; ++k) g[k] = g[k] * coef;
  }
}

void LayerWisePart::step_optimizer(const Hypers& h) {
  std::vector<const float*> grads;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (uint32_t i : owned_) {
    grads.push_back(grad_.data() + mats_[i].grad_off);
    shapes.emplace_back(mats_[i].rows, mats_[i].cols);
  }
  optimizer_step(st_, grads, h, shapes);
}

void LayerWisePart::copy_back() {
  // One pass over the owned matrices; compact FP8 ones become one batched quantization.
  std::vector<fp8::FragmentJob> jobs;
  std::vector<uint32_t> job_mat;
  for (uint32_t i : owned_) {
    const Matrix& m = mats_[i];
    const float* master = st_.master.data() + st_.fragments[static_cast<size_t>(m.frag)].offset;
    switch (m.transport) {
      case Transport::bf16:
        for (uint64_t k = 0; k < m.numel; ++k) bf16_xfer_[m.xfer_off + k] = bf16_from_float(master[k]);
        break;
      case Transport::f32: std::memcpy(f32_xfer_.data() + m.xfer_off, master, m.numel * 4); break;
      case Transport::fp8_compact: {
        const fp8::Plan& p = tensor(m).from_master;
        fp8::FragmentJob j;
        j.plan = &p;
        j.start = 0;
        j.count = m.numel;
        j.in = master;
        j.amax = amax_xfer_.data() + m.amax_xfer_off;
        std::fill(j.amax, j.amax + p.grid.size(), 0.0f);
        j.out = fp8_data_.data() + m.data_off;
        jobs.push_back(j);
        job_mat.push_back(i);
        break;
      }
    }
  }
  if (jobs.empty()) return;
  if (is_delayed(cfg_.fp8)) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      load_delayed_scales(fstate(mats_[job_mat[k]]));
      jobs[k].scales = fstate(mats_[job_mat[k]]).scales.view();
    }
    fp8::batch_cast(jobs.data(), jobs.size(), pool_);
    fp8::batch_partial_amax(jobs.data(), jobs.size(), pool_);  // recorded by every rank in requantize()
    return;
  }
  fp8::batch_partial_amax(jobs.data(), jobs.size(), pool_);
  for (size_t k = 0; k < jobs.size(); ++k) {
    const Matrix& m = mats_[job_mat[k]];
    compute_into(tensor(m).from_master, jobs[k].amax, nullptr, fstate(m).scales);
    jobs[k].scales = fstate(m).scales.view();
  }
  fp8::batch_cast(jobs.data(), jobs.size(), pool_);
}

void LayerWisePart::gather(std::vector<comm::WorkPtr>& works) {
  // Every rank joins every gather (empty ranks contribute 0 bytes), even when all sizes are 0.
  if (!bf16_xfer_.empty()) works.push_back(comm_.all_gather_v(bf16_xfer_.data(), bf16_bytes_));
  if (!f32_xfer_.empty()) works.push_back(comm_.all_gather_v(f32_xfer_.data(), f32_bytes_));
  if (!amax_xfer_.empty()) {
    works.push_back(comm_.all_gather_v(fp8_data_.data(), fp8_bytes_));
    works.push_back(comm_.all_gather_v(amax_xfer_.data(), amax_bytes_));
  }
}

void LayerWisePart::requantize() {
  const bool delayed = is_delayed(cfg_.fp8);
  std::vector<fp8::FragmentJob> jobs;
  std::vector<uint32_t> job_mat;
  for (uint32_t i = 0; i < mats_.size(); ++i) {
    const Matrix& m = mats_[i];
    if (m.fp8 < 0) continue;
    if (m.transport == Transport::fp8_compact) {
      // The owner's bytes arrived with their amax grid: derive the same scales here.
      const float* a = amax_xfer_.data() + m.amax_xfer_off;
      if (delayed) {
        load_delayed_scales(fstate(m));  // what the owner cast with
        record_delayed(cfg_.fp8, fstate(m), a[0]);
      } else {
        compute_into(tensor(m).from_master, a, nullptr, fstate(m).scales);
      }
      continue;
    }
    const fp8::Plan& p = tensor(m).from_bf16;
    fp8::FragmentJob j;
    j.plan = &p;
    j.start = 0;
    j.count = m.numel;
    j.in = bf16_xfer_.data() + m.xfer_off;
    j.amax = amax_.data() + m.amax_off;
    j.amax_col = p.has_columnwise() ? amax_.data() + m.amax_off + p.grid.size() : nullptr;
    j.out = fp8_data_.empty() ? nullptr : fp8_data_.data() + m.data_off;
    j.out_col = fp8_col_.empty() ? nullptr : fp8_col_.data() + m.data_off;
    jobs.push_back(j);
    job_mat.push_back(i);
  }
  if (jobs.empty()) return;
  std::fill(amax_.begin(), amax_.end(), 0.0f);
  if (delayed) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      load_delayed_scales(fstate(mats_[job_mat[k]]));
      jobs[k].scales = fstate(mats_[job_mat[k]]).scales.view();
    }
    fp8::batch_cast(jobs.data(), jobs.size(), pool_);
    fp8::batch_partial_amax(jobs.data(), jobs.size(), pool_);
    for (size_t k = 0; k < jobs.size(); ++k) record_delayed(cfg_.fp8, fstate(mats_[job_mat[k]]), jobs[k].amax[0]);
    return;
  }
  fp8::batch_partial_amax(jobs.data(), jobs.size(), pool_);
  for (size_t k = 0; k < jobs.size(); ++k) {
    const Matrix& m = mats_[job_mat[k]];
    compute_into(*jobs[k].plan, jobs[k].amax, jobs[k].amax_col, fstate(m).scales);
    jobs[k].scales = fstate(m).scales.view();
  }
  fp8::batch_cast(jobs.data(), jobs.size(), pool_);
}

}  // namespace fpg::pipeline
