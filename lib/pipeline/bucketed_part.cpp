#include "pipeline/bucketed_part.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/float_codec.h"
#include "fp8/batch.h"
#include "pipeline/byte_append.h"

namespace fpg::pipeline {

BucketedPart::BucketedPart(const model::ModelSpec& spec, layout::BucketedLayout layout, const PipelineConfig& cfg,
                           comm::Communicator& comm, OptimizerState& state,
                           std::vector<Fp8ParamState>& fp8_states, const std::vector<Fp8Tensor>& fp8,
                           const std::vector<int32_t>& fp8_index, ThreadPool& pool)
    : spec_(spec), layout_(std::move(layout)), cfg_(cfg), comm_(comm), st_(state), fp8_states_(fp8_states),
      fp8_(fp8), fp8_index_(fp8_index), pool_(pool) {
  if (layout_.dp != static_cast<uint32_t>(comm_.size()))
    throw InternalError("pipeline: layout for dp " + std::to_string(layout_.dp) + " on a group of " +
                        std::to_string(comm_.size()));
  const uint32_t rank = static_cast<uint32_t>(comm_.rank());
  where_.assign(spec_.params.size(), Where{});
  bufs_.resize(layout_.buffers.size());
  for (size_t b = 0; b < layout_.buffers.size(); ++b) {
    const layout::Buffer& buf = layout_.buffers[b];
    BufferStorage& s = bufs_[b];
    s.grad.assign(buf.numel, 0.0f);  // padding stays zero forever: the reduce-scatter sums zeros there
    switch (buf.key.param_dtype) {
      case DType::BF16: s.bf16.assign(buf.numel, 0); break;
      case DType::F32: s.f32.assign(buf.numel, 0.0f); break;
      case DType::U8: s.u8.assign(buf.numel, 0); break;
      default: throw InternalError("pipeline: unexpected buffer dtype");
    }
    for (const layout::ParamSlot& slot : buf.params) {
      where_[slot.param] = Where{static_cast<int32_t>(b), slot.world.begin};
      if (buf.key.param_dtype == DType::U8) {
        if (fp8_index_[slot.param] < 0)
          throw InternalError("pipeline: param " + slot.name + " is in an FP8 buffer but has no FP8 plan");
        const Fp8Tensor& t = fp8_[static_cast<size_t>(fp8_index_[slot.param])];
        if (t.from_master.has_columnwise() && s.u8_col.empty()) s.u8_col.assign(buf.numel, 0);
        fp8_mine_.push_back(static_cast<uint32_t>(fp8_index_[slot.param]));
      }
    }
  }
  std::sort(fp8_mine_.begin(), fp8_mine_.end());
  if (cfg_.fp8.enabled && cfg_.fp8.recipe.scaling == fp8::Scaling::mxfp8 && !cfg_.fp8.recipe.mx_rowwise)
    for (BufferStorage& s : bufs_) s.u8.clear();  // MXFP8 columnwise only: no rowwise data
  uint64_t off = 0;
  for (uint32_t i : fp8_mine_) {
    const fp8::Plan& p = fp8_[i].from_master;
    amax_off_.push_back(off);
    off += p.grid.size();
    amax_col_off_.push_back(off);
    off += p.col_grid.size();
  }
  amax_.assign(off, 0.0f);

  // This rank's fragments, as optimizer state fragments (explicit param -> fragment map).
  st_.fragments.clear();
  st_.by_param.clear();
  for (const layout::RankFragment& rf : layout::rank_fragments(layout_, rank)) {
    const layout::Fragment& f = rf.fragment;
    st_.add(f.param, f.param_range, spec_.params[f.param].numel());
    frag_world_.push_back(f.gbuf_world.begin);
    frag_buffer_.push_back(rf.buffer);
  }
  st_.allocate();
}

float* BucketedPart::grad_of(uint32_t param) {
  const Where& w = where_[param];
  return bufs_[static_cast<size_t>(w.buffer)].grad.data() + w.begin;
}

const float* BucketedPart::owned_grad(const StateFragment& f) const {
  const size_t i = static_cast<size_t>(&f - st_.fragments.data());
  return bufs_[frag_buffer_[i]].grad.data() + frag_world_[i];
}

void BucketedPart::materialize(uint32_t param, float* out) const {
  const Where& w = where_[param];
  const BufferStorage& s = bufs_[static_cast<size_t>(w.buffer)];
  const uint64_t n = spec_.params[param].numel();
  switch (layout_.buffers[static_cast<size_t>(w.buffer)].key.param_dtype) {
    case DType::BF16:
      for (uint64_t i = 0; i < n; ++i) out[i] = float_from_bf16(s.bf16[w.begin + i]);
      break;
    case DType::F32: std::memcpy(out, s.f32.data() + w.begin, n * sizeof(float)); break;
    case DType::U8: {
      const Fp8Tensor& t = fp8_[static_cast<size_t>(fp8_index_[param])];
      const Fp8ParamState& st = fp8_states_[t.state];
      const bool row = t.from_master.has_rowwise();
      fp8::dequantize_fragment(t.from_master, st.scales.view(), 0, n,
                               (row ? s.u8.data() : s.u8_col.data()) + w.begin, out, !row);
      break;
    }
    default: break;
  }
}

ParamStorage BucketedPart::storage(uint32_t param) {
  const Where& w = where_[param];
  BufferStorage& s = bufs_[static_cast<size_t>(w.buffer)];
  ParamStorage out;
  out.numel = spec_.params[param].numel();
  switch (layout_.buffers[static_cast<size_t>(w.buffer)].key.param_dtype) {
    case DType::BF16:
      out.dtype = DType::BF16;
      out.data = reinterpret_cast<uint8_t*>(s.bf16.data() + w.begin);
      break;
    case DType::F32:
      out.dtype = DType::F32;
      out.data = reinterpret_cast<uint8_t*>(s.f32.data() + w.begin);
      break;
    case DType::U8:
      out.dtype = fp8_dtype(cfg_.fp8.recipe.format);
      out.data = s.u8.empty() ? nullptr : s.u8.data() + w.begin;
      out.col = s.u8_col.empty() ? nullptr : s.u8_col.data() + w.begin;
      break;
    default: throw InternalError("pipeline: unexpected buffer dtype");
  }
  return out;
}

std::vector<uint8_t> BucketedPart::stored_bytes(uint32_t param) const {
  const Where& w = where_[param];
  const BufferStorage& s = bufs_[static_cast<size_t>(w.buffer)];
  const uint64_t n = spec_.params[param].numel();
  std::vector<uint8_t> out;
  switch (layout_.buffers[static_cast<size_t>(w.buffer)].key.param_dtype) {
    case DType::BF16: append_bytes(out, s.bf16.data() + w.begin, n * 2); break;
    case DType::F32: append_bytes(out, s.f32.data() + w.begin, n * 4); break;
    case DType::U8: {
      if (!s.u8.empty()) append_bytes(out, s.u8.data() + w.begin, n);
      if (!s.u8_col.empty()) append_bytes(out, s.u8_col.data() + w.begin, n);
      const Fp8ParamState& st = fp8_states_[fp8_[static_cast<size_t>(fp8_index_[param])].state];
      append_fp8_state(out, st);
      break;
    }
    default: break;
  }
  return out;
}

void BucketedPart::reduce_scatter(std::vector<comm::WorkPtr>& works) {
  const uint32_t dp = layout_.dp;
  for (size_t b = 0; b < layout_.buffers.size(); ++b)
    for (const layout::Bucket& bucket : layout_.buffers[b].buckets)
      works.push_back(comm_.reduce_scatter(bufs_[b].grad.data() + bucket.world.begin, bucket.numel() / dp,
                                           DType::F32, comm::ReduceOp::sum));
}

void BucketedPart::scale_grads(float divisor, GradNorm& nrm) {
  for (size_t i = 0; i < st_.fragments.size(); ++i) {
    float* g = bufs_[frag_buffer_[i]].grad.data() + frag_world_[i];
    const uint64_t n = st_.fragments[i].param_range.size();
    nrm.local_max = divide_and_max_abs(g, n, divisor, nrm.local_max);
  }
}

void BucketedPart::add_squares(GradNorm& nrm) const {
  for (const StateFragment& f : st_.fragments)
    add_scaled_squares(owned_grad(f), f.param_range.size(), nrm.exponent, nrm.local_sum);
}

void BucketedPart::clip(float coef) {
  for (size_t i = 0; i < st_.fragments.size(); ++i) {
    float* g = bufs_[frag_buffer_[i]].grad.data() + frag_world_[i];
    const uint64_t n = st_.fragments[i].param_range.size();
    for (uint64_t k = 0; k < n; ++k) g[k] = g[k] * coef;
  }
}

void BucketedPart::step_optimizer(const Hypers& h) {
  std::vector<const float*> grads(st_.fragments.size());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = owned_grad(st_.fragments[i]);
  optimizer_step(st_, grads, h);
}

void BucketedPart::copy_back() {
  // One pass over the owned fragments: bf16 and fp32 written here, FP8 ones become jobs.
  std::vector<fp8::FragmentJob> jobs;
  std::vector<size_t> job_state;  // the Fp8ParamState of each job, to point at its scales below
  for (size_t i = 0; i < st_.fragments.size(); ++i) {
    const StateFragment& f = st_.fragments[i];
    const float* m = st_.master.data() + f.offset;
    const uint64_t n = f.param_range.size();
    BufferStorage& s = bufs_[frag_buffer_[i]];
    const uint64_t at = frag_world_[i];
    switch (layout_.buffers[frag_buffer_[i]].key.param_dtype) {
      case DType::BF16:
        for (uint64_t k = 0; k < n; ++k) s.bf16[at + k] = bf16_from_float(m[k]);
        break;
      case DType::F32: std::memcpy(s.f32.data() + at, m, n * sizeof(float)); break;
      case DType::U8: {
        const size_t mine = static_cast<size_t>(
            std::lower_bound(fp8_mine_.begin(), fp8_mine_.end(), static_cast<uint32_t>(fp8_index_[f.param])) -
            fp8_mine_.begin());
        const Fp8Tensor& t = fp8_[fp8_mine_[mine]];
        fp8::FragmentJob j;
        j.plan = &t.from_master;
        j.start = f.param_range.begin;
        j.count = n;
        j.in = m;
        j.amax = amax_.data() + amax_off_[mine];
        j.amax_col = t.from_master.has_columnwise() ? amax_.data() + amax_col_off_[mine] : nullptr;
        j.out = t.from_master.has_rowwise() ? s.u8.data() + at : nullptr;
        j.out_col = t.from_master.has_columnwise() ? s.u8_col.data() + at : nullptr;
        jobs.push_back(j);
        job_state.push_back(t.state);
        break;
      }
      default: break;
    }
  }
  if (fp8_mine_.empty()) return;
  // Every rank joins the packed collective, owning FP8 fragments or not.
  std::fill(amax_.begin(), amax_.end(), 0.0f);
  const bool delayed = is_delayed(cfg_.fp8);
  if (delayed) {
    // Cast with the current scale (from the history up to the previous step) and take this step's
    // amax in the same batched pass over the fragments.
    for (uint32_t i : fp8_mine_) load_delayed_scales(fp8_states_[fp8_[i].state]);
    for (size_t k = 0; k < jobs.size(); ++k) jobs[k].scales = fp8_states_[job_state[k]].scales.view();
    fp8::batch_cast(jobs.data(), jobs.size(), pool_);
    fp8::batch_partial_amax(jobs.data(), jobs.size(), pool_);
    comm_.all_reduce(amax_.data(), amax_.size(), DType::F32, comm::ReduceOp::max)->wait();
    for (size_t k = 0; k < fp8_mine_.size(); ++k) {
      Fp8ParamState& st = fp8_states_[fp8_[fp8_mine_[k]].state];
      record_delayed(cfg_.fp8, st, amax_[amax_off_[k]]);
    }
    return;
  }
  fp8::batch_partial_amax(jobs.data(), jobs.size(), pool_);
  comm_.all_reduce(amax_.data(), amax_.size(), DType::F32, comm::ReduceOp::max)->wait();
  for (size_t k = 0; k < fp8_mine_.size(); ++k) {
    const Fp8Tensor& t = fp8_[fp8_mine_[k]];
    fp8::Scales& sc = fp8_states_[t.state].scales;
    const fp8::Plan& p = t.from_master;
    fp8::compute_scales(p, amax_.data() + amax_off_[k], amax_.data() + amax_col_off_[k],
                        sc.scale.empty() ? nullptr : sc.scale.data(),
                        sc.scale_inv.empty() ? nullptr : sc.scale_inv.data(),
                        sc.e8m0.empty() ? nullptr : sc.e8m0.data(),
                        sc.e8m0_col.empty() ? nullptr : sc.e8m0_col.data());
  }
  for (size_t k = 0; k < jobs.size(); ++k) jobs[k].scales = fp8_states_[job_state[k]].scales.view();
  fp8::batch_cast(jobs.data(), jobs.size(), pool_);
}

void BucketedPart::gather(std::vector<comm::WorkPtr>& works) {
  const uint32_t dp = layout_.dp;
  for (size_t b = 0; b < layout_.buffers.size(); ++b) {
    BufferStorage& s = bufs_[b];
    for (const layout::Bucket& bucket : layout_.buffers[b].buckets) {
      const uint64_t L = bucket.numel() / dp;
      if (!s.bf16.empty()) works.push_back(comm_.all_gather(s.bf16.data() + bucket.world.begin, L * 2));
      if (!s.f32.empty()) works.push_back(comm_.all_gather(s.f32.data() + bucket.world.begin, L * 4));
      if (!s.u8.empty()) works.push_back(comm_.all_gather(s.u8.data() + bucket.world.begin, L));
      if (!s.u8_col.empty()) works.push_back(comm_.all_gather(s.u8_col.data() + bucket.world.begin, L));
    }
  }
}

}  // namespace fpg::pipeline
