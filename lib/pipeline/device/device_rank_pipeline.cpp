#include "pipeline/device/device_rank_pipeline.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "comm/nccl_backend.h"
#include "core/error.h"
#include "pipeline/device/device_buffer.h"
#include "pipeline/device/device_fp8_params.h"
#include "pipeline/device/device_layer_wise_part.h"
#include "kernels/cast_bf16.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_shard.h"
#include "kernels/grad_norm.h"
#include "kernels/optim_fused.h"
#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"
#include "pipeline/byte_append.h"
#include "pipeline/fp8_params.h"
#include "pipeline/grad_norm.h"
#include "pipeline/optimizer_step.h"
#include "pipeline/rank_plan.h"
#include "pipeline/step_orchestrator.h"

namespace fpg::device {
namespace {

using pipeline::StateFragment;

// One layout buffer on the device (pipeline::BufferStorage).
struct DeviceStorage {
  DType dtype = DType::BF16;  // BF16, F32 or U8
  DeviceBuffer data;          // bf16 bits / fp32 / FP8 rowwise bytes (empty for MXFP8 columnwise only)
  DeviceBuffer col;           // FP8 MXFP8 columnwise bytes
  DeviceBuffer grad;          // fp32 grads of the whole buffer
};

struct Where {
  int32_t buffer = -1;
  uint64_t begin = 0;  // buffer coordinates
};

}  // namespace

struct DeviceRankPipeline::Impl final : pipeline::StepBackend {
  model::ModelSpec spec;
  pipeline::PipelineConfig cfg;
  comm::Communicator& comm;
  cudaStream_t stream = nullptr;
  layout::BucketedLayout layout;
  // Host: the fragment map, kind, step and the FP8 states' shapes; the arenas live on the device.
  pipeline::RankState state;
  bool has_exp_avg = false, has_exp_avg_sq = false;
  DeviceBuffer master, exp_avg, exp_avg_sq;
  std::vector<pipeline::Fp8Tensor> fp8;
  std::vector<int32_t> fp8_index;
  std::vector<DeviceStorage> bufs;
  std::vector<Where> where;            // per spec param
  std::vector<uint64_t> frag_world;    // per state fragment: buffer coordinates of its first element
  std::vector<uint32_t> frag_buffer;   // per state fragment: its buffer
  std::unique_ptr<cuda::GradSpanTable> grads;    // the owned grads
  std::unique_ptr<cuda::FragmentTable> optim;    // the owned fragments
  std::unique_ptr<DeviceFp8Params> fp8_dev;
  DeviceBuffer scalar;                           // the grad-norm max's all-reduce
  std::vector<DeviceBuffer> values;              // decoded fp32 params (not for fp32-kept ones)
  std::vector<const float*> param_ptrs;
  // ParamView::bf16: bf16 arrays of the params not read in place, their pointers, and an fp32 scratch
  // of the largest param decoded through fp32 first (FP8, layer-wise matrices).
  ParamView view = ParamView::fp32;
  std::vector<DeviceBuffer> values16;
  std::vector<const uint16_t*> param16_ptrs;
  DeviceBuffer scratch32;
  std::vector<float*> grad_ptrs;
  // Overlap (pipeline/device/bucket_sync.h): buckets as flat ids, in (buffer, bucket) order.
  DeviceOverlap overlap;
  std::vector<std::pair<uint32_t, uint32_t>> bucket_at;  // flat id -> (buffer, bucket)
  // --dist-opt layerwise: the matrices (device_layer_wise_part.h); `layout` is then its scalar layout.
  // They sync as one more flat bucket, `lw_bucket` (after the scalar layout's): its grads all-reduce
  // once all the matrices' grads are ready, and its gather is waited, then re-quantized, on first read.
  std::unique_ptr<layout::LayerWiseLayout> lw_layout;
  std::unique_ptr<DeviceLayerWisePart> lw;
  uint32_t lw_bucket = UINT32_MAX;
  BucketSync bsync;
  std::vector<comm::WorkPtr> rs_works;                  // the step's reduce-scatters
  std::vector<std::vector<comm::WorkPtr>> gather_works;  // per bucket, until waited
  ParamHooks hooks;                                      // what a hooked grad_fn calls (param_hooks())
  float clip_coef = 1.0f;  // the step's clip of the bucketed grads, applied as the optimizer reads them
  ParamReads reads = ParamReads::complete;               // the current step's grad_fn's

  Impl(const model::ModelSpec& s, const pipeline::PipelineConfig& c, comm::Communicator& cm)
      : spec(s), cfg(c), comm(cm) {}

  float* grad_at(size_t frag) const { return bufs[frag_buffer[frag]].grad.as<float>() + frag_world[frag]; }
  void sync() const { FPG_CUDA_CHECK(cudaStreamSynchronize(stream)); }
  void build_storage();
  void init_masters(const pipeline::InitFn& init);
  void build_tables();
  void build_bucket_sync();
  void issue_reduce_scatter(uint32_t bucket);
  void issue_gathers();
  void wait_gather(uint32_t bucket);
  void decode_param(uint32_t p);
  void decode_param_bf16(uint32_t p);
  void build_views();
  // Masters -> stored bytes; fused: the bf16 buffers' fragments were written by the optimizer.
  void copy_back_parts(bool fused);
  void before_read(uint32_t p);
  void finish_param_sync();

  // pipeline::StepBackend: the phases of a step on the compute stream (device_rank_pipeline.h).
  comm::Communicator& communicator() override { return comm; }
  const pipeline::PipelineConfig& config() const override { return cfg; }
  void forward_backward(const pipeline::GradFn& grad_fn) override;
  void reduce_grads() override;
  void scale_grads(float divisor, pipeline::GradNorm& norm) override;
  float all_reduce_max(float local) override;
  bool scale_grads_and_add_squares(float divisor, pipeline::GradNorm& norm) override;
  void add_squares(pipeline::GradNorm& norm) override;
  void clip(float coef) override;
  void step_optimizer() override;
  int64_t optimizer_steps() const override { return state.bucketed.step; }
  void copy_back() override { copy_back_parts(view == ParamView::bf16); }
  void gather() override;
  void requantize() override {}  // the layer-wise matrices re-quantize when their gather is waited
  bool decode() override;
  void end_phase() override { sync(); }
};

void DeviceRankPipeline::Impl::build_storage() {
  where.assign(spec.params.size(), Where{});
  bufs.resize(layout.buffers.size());
  const bool mx_col_only = cfg.fp8.enabled && cfg.fp8.recipe.scaling == fp8::Scaling::mxfp8 && !cfg.fp8.recipe.mx_rowwise;
  for (size_t b = 0; b < layout.buffers.size(); ++b) {
    const layout::Buffer& buf = layout.buffers[b];
    DeviceStorage& s = bufs[b];
    s.dtype = buf.key.param_dtype;
    s.grad = DeviceBuffer(buf.numel * 4, stream);  // padding stays zero forever, as on the CPU
    bool col = false;
    for (const layout::ParamSlot& slot : buf.params) {
      where[slot.param] = Where{static_cast<int32_t>(b), slot.world.begin};
      if (s.dtype == DType::U8) {
        if (fp8_index[slot.param] < 0)
          throw InternalError("pipeline: param " + slot.name + " is in an FP8 buffer but has no FP8 plan");
        col |= fp8[static_cast<size_t>(fp8_index[slot.param])].from_master.has_columnwise();
      }
    }
    switch (s.dtype) {
      case DType::BF16: s.data = DeviceBuffer(buf.numel * 2, stream); break;
      case DType::F32: s.data = DeviceBuffer(buf.numel * 4, stream); break;
      case DType::U8:
        if (!mx_col_only) s.data = DeviceBuffer(buf.numel, stream);
        if (col) s.col = DeviceBuffer(buf.numel, stream);
        break;
      default: throw InternalError("pipeline: unexpected buffer dtype");
    }
  }
  // This rank's fragments, as optimizer state fragments (BucketedPart's order).
  pipeline::OptimizerState& st = state.bucketed;
  st.fragments.clear();
  st.by_param.clear();
  for (const layout::RankFragment& rf : layout::rank_fragments(layout, state.rank)) {
    const layout::Fragment& f = rf.fragment;
    st.add(f.param, f.param_range, spec.params[f.param].numel());
    frag_world.push_back(f.gbuf_world.begin);
    frag_buffer.push_back(rf.buffer);
  }
}

void DeviceRankPipeline::Impl::init_masters(const pipeline::InitFn& init) {
  pipeline::OptimizerState& st = state.bucketed;
  st.allocate();  // host arenas only to learn their sizes and hold the initial masters
  has_exp_avg = !st.exp_avg.empty();
  has_exp_avg_sq = !st.exp_avg_sq.empty();
  std::vector<float> scratch;
  for (const auto& [param, ids] : st.by_param) {
    scratch.resize(spec.params[param].numel());
    init(param, scratch.data());
    for (uint32_t id : ids) {
      const StateFragment& f = st.fragments[id];
      std::copy(scratch.begin() + static_cast<int64_t>(f.param_range.begin),
                scratch.begin() + static_cast<int64_t>(f.param_range.end),
                st.master.begin() + static_cast<int64_t>(f.offset));
    }
  }
  const size_t bytes = st.master.size() * 4;
  master = DeviceBuffer(bytes, stream);
  copy_to_device(master.get(), st.master.data(), bytes, stream);
  if (has_exp_avg) exp_avg = DeviceBuffer(bytes, stream);
  if (has_exp_avg_sq) exp_avg_sq = DeviceBuffer(bytes, stream);
  // The device holds the arenas from here on.
  st.master = {};
  st.exp_avg = {};
  st.exp_avg_sq = {};
  st.momentum = {};
}

void DeviceRankPipeline::Impl::build_tables() {
  const pipeline::OptimizerState& st = state.bucketed;
  std::vector<cuda::GradSpan> spans;
  std::vector<optim::Fragment> frags;
  std::vector<uint16_t*> bf16_out;  // ParamView::bf16: the copy-back of bf16 buffers, fused
  std::vector<Fp8Fragment> fp8_frags;
  for (size_t i = 0; i < st.fragments.size(); ++i) {
    const StateFragment& f = st.fragments[i];
    const int64_t n = static_cast<int64_t>(f.param_range.size());
    spans.push_back(cuda::GradSpan{grad_at(i), n});
    optim::Fragment o;
    o.param = master.as<float>() + f.offset;
    o.grad = grad_at(i);
    o.exp_avg = has_exp_avg ? exp_avg.as<float>() + f.offset : nullptr;
    o.exp_avg_sq = has_exp_avg_sq ? exp_avg_sq.as<float>() + f.offset : nullptr;
    o.numel = n;
    o.param_offset = static_cast<int64_t>(f.param_range.begin);
    o.param_numel = static_cast<int64_t>(f.param_numel);
    frags.push_back(o);
    if (view == ParamView::bf16) {
      const DeviceStorage& s = bufs[frag_buffer[i]];
      bf16_out.push_back(s.dtype == DType::BF16 ? s.data.as<uint16_t>() + frag_world[i] : nullptr);
    }
    if (fp8_index[f.param] >= 0) {
      const uint32_t t = static_cast<uint32_t>(fp8_index[f.param]);
      const DeviceStorage& s = bufs[frag_buffer[i]];
      const uint64_t at = frag_world[i];
      Fp8Fragment j;
      j.tensor = t;
      j.start = f.param_range.begin;
      j.count = f.param_range.size();
      j.master = master.as<float>() + f.offset;
      j.out = fp8[t].from_master.has_rowwise() ? s.data.as<uint8_t>() + at : nullptr;
      j.out_col = fp8[t].from_master.has_columnwise() ? s.col.as<uint8_t>() + at : nullptr;
      fp8_frags.push_back(j);
    }
  }
  grads = std::make_unique<cuda::GradSpanTable>(spans);
  optim = std::make_unique<cuda::FragmentTable>(frags, has_exp_avg_sq, bf16_out);
  fp8_dev = std::make_unique<DeviceFp8Params>(cfg, fp8, state.fp8, stream);
  fp8_dev->build(fp8_frags);
  // The tables went up by cudaMemcpy on the legacy stream, which the non-blocking compute stream does
  // not wait for: finish them before the first launch reads them (once, at construction).
  FPG_CUDA_CHECK(cudaDeviceSynchronize());
}

void DeviceRankPipeline::Impl::copy_back_parts(bool fused) {
  const pipeline::OptimizerState& st = state.bucketed;
  for (size_t i = 0; i < st.fragments.size(); ++i) {
    const StateFragment& f = st.fragments[i];
    const float* m = master.as<float>() + f.offset;
    const uint64_t n = f.param_range.size();
    const DeviceStorage& s = bufs[frag_buffer[i]];
    const uint64_t at = frag_world[i];
    switch (s.dtype) {
      case DType::BF16:
        if (!fused) cuda::cast_f32_to_bf16(m, n, s.data.as<uint16_t>() + at, stream);
        break;
      case DType::F32:
        FPG_CUDA_CHECK(cudaMemcpyAsync(s.data.as<float>() + at, m, n * 4, cudaMemcpyDeviceToDevice, stream));
        break;
      default: break;  // FP8: the batched pass below
    }
  }
  fp8_dev->copy_back(comm, stream);  // every rank joins its collective, owning FP8 fragments or not
  if (lw) lw->copy_back();
}

void DeviceRankPipeline::Impl::build_bucket_sync() {
  std::vector<uint32_t> bucket_of(spec.params.size(), 0);
  for (uint32_t b = 0; b < layout.buffers.size(); ++b) {
    const uint32_t first = static_cast<uint32_t>(bucket_at.size());
    for (uint32_t k = 0; k < layout.buffers[b].buckets.size(); ++k) bucket_at.emplace_back(b, k);
    for (const layout::ParamSlot& slot : layout.buffers[b].params) bucket_of[slot.param] = first + slot.bucket;
  }
  uint32_t buckets = static_cast<uint32_t>(bucket_at.size());
  if (lw) {
    lw_bucket = buckets++;
    for (uint32_t p = 0; p < spec.params.size(); ++p)
      if (lw->holds(p)) bucket_of[p] = lw_bucket;
  }
  bsync = BucketSync(std::move(bucket_of), buckets);
  gather_works.resize(buckets);
}

void DeviceRankPipeline::Impl::issue_reduce_scatter(uint32_t id) {
  if (id == lw_bucket) {  // the matrices' grads: one all-reduce (device_layer_wise_part.h)
    lw->all_reduce(rs_works);
    bsync.mark_reduce_scatter_issued(id);
    return;
  }
  const auto [b, k] = bucket_at[id];
  const layout::Bucket& bucket = layout.buffers[b].buckets[k];
  rs_works.push_back(comm.reduce_scatter(bufs[b].grad.as<float>() + bucket.world.begin, bucket.numel() / layout.dp,
                                         DType::F32, comm::ReduceOp::sum));
  bsync.mark_reduce_scatter_issued(id);
}

// In-place all-gather per bucket (param buffer and columnwise twin), left in flight.
void DeviceRankPipeline::Impl::issue_gathers() {
  const uint32_t dp = layout.dp;
  for (uint32_t id = 0; id < bucket_at.size(); ++id) {
    const auto [b, k] = bucket_at[id];
    const DeviceStorage& s = bufs[b];
    const layout::Bucket& bucket = layout.buffers[b].buckets[k];
    const uint64_t elem = s.dtype == DType::BF16 ? 2 : s.dtype == DType::F32 ? 4 : 1;
    const uint64_t L = bucket.numel() / dp;
    if (!s.data.empty())
      gather_works[id].push_back(comm.all_gather(s.data.as<uint8_t>() + bucket.world.begin * elem, L * elem));
    if (!s.col.empty()) gather_works[id].push_back(comm.all_gather(s.col.as<uint8_t>() + bucket.world.begin, L));
    bsync.mark_gather_issued(id);
  }
  if (lw) {  // the owners' uneven gathers
    lw->gather(gather_works[lw_bucket]);
    bsync.mark_gather_issued(lw_bucket);
  }
}

void DeviceRankPipeline::Impl::wait_gather(uint32_t id) {
  if (bsync.gather(id) != GatherState::issued) return;
  comm::wait_all(gather_works[id]);  // the compute stream waits the events; the host goes on
  gather_works[id].clear();
  if (id == lw_bucket) lw->requantize();  // every rank's FP8 matrices from the gathered bytes
  bsync.mark_gather_waited(id);
}

// Param p to fp32 (bf16 -> fp32 cast; FP8 dequantized; fp32-kept params are read in place).
void DeviceRankPipeline::Impl::decode_param(uint32_t p) {
  if (view == ParamView::bf16) {
    decode_param_bf16(p);
    return;
  }
  if (lw && lw->holds(p)) {
    lw->decode(p, values[p].as<float>());
    bsync.mark_decoded(p);
    return;
  }
  const Where& w = where[p];
  const DeviceStorage& s = bufs[static_cast<size_t>(w.buffer)];
  const uint64_t n = spec.params[p].numel();
  float* out = values[p].as<float>();
  switch (s.dtype) {
    case DType::BF16: cuda::cast_bf16_to_f32(s.data.as<uint16_t>() + w.begin, n, out, stream); break;
    case DType::F32: break;  // read in place
    case DType::U8: {
      const uint32_t t = static_cast<uint32_t>(fp8_index[p]);
      const fp8::Plan& plan = fp8[t].from_master;
      const bool row = plan.has_rowwise();
      cuda::fp8::dequantize_fragment(plan, fp8_dev->view(t), 0, n,
                                     (row ? s.data.as<uint8_t>() : s.col.as<uint8_t>()) + w.begin, out, !row, stream);
      break;
    }
    default: break;
  }
  bsync.mark_decoded(p);
}

// Param p to bf16 (ParamView::bf16): bf16-stored params are read in place; the others are rounded from
// the fp32 the fp32 view decodes (fp32-kept: their bytes; FP8 and layer-wise: through scratch32).
void DeviceRankPipeline::Impl::decode_param_bf16(uint32_t p) {
  const uint64_t n = spec.params[p].numel();
  uint16_t* out = values16[p].as<uint16_t>();
  if (lw && lw->holds(p)) {
    const float* in_place = lw->in_place(p);
    if (!in_place) lw->decode(p, scratch32.as<float>());
    cuda::cast_f32_to_bf16(in_place ? in_place : scratch32.as<float>(), n, out, stream);
    bsync.mark_decoded(p);
    return;
  }
  const Where& w = where[p];
  const DeviceStorage& s = bufs[static_cast<size_t>(w.buffer)];
  switch (s.dtype) {
    case DType::BF16: break;  // read in place
    case DType::F32: cuda::cast_f32_to_bf16(s.data.as<float>() + w.begin, n, out, stream); break;
    case DType::U8: {
      const uint32_t t = static_cast<uint32_t>(fp8_index[p]);
      const fp8::Plan& plan = fp8[t].from_master;
      const bool row = plan.has_rowwise();
      cuda::fp8::dequantize_fragment(plan, fp8_dev->view(t), 0, n,
                                     (row ? s.data.as<uint8_t>() : s.col.as<uint8_t>()) + w.begin,
                                     scratch32.as<float>(), !row, stream);
      cuda::cast_f32_to_bf16(scratch32.as<float>(), n, out, stream);
      break;
    }
    default: break;
  }
  bsync.mark_decoded(p);
}

void DeviceRankPipeline::Impl::before_read(uint32_t p) {
  if (bsync.decoded(p)) return;
  wait_gather(bsync.bucket_of(p));
  decode_param(p);
}

// Waits in bucket order, then decodes in spec order: without param_gather, the launches of the
// synchronous gather-then-decode.
void DeviceRankPipeline::Impl::finish_param_sync() {
  for (uint32_t id = 0; id < bsync.buckets(); ++id) wait_gather(id);
  for (uint32_t p = 0; p < spec.params.size(); ++p)
    if (!bsync.decoded(p)) decode_param(p);
}

float DeviceRankPipeline::Impl::all_reduce_max(float local) {
  copy_to_device(scalar.get(), &local, 4, stream);
  comm.all_reduce(scalar.get(), 1, DType::F32, comm::ReduceOp::max)->wait();
  float m = 0;
  copy_to_host(&m, scalar.get(), 4, stream);
  return m;
}

DeviceRankPipeline::DeviceRankPipeline(const model::ModelSpec& spec, const pipeline::PipelineConfig& cfg,
                                       comm::Communicator& comm, const pipeline::InitFn& init, DeviceOverlap overlap,
                                       ParamView view)
    : impl_(std::make_unique<Impl>(spec, cfg, comm)) {
  Impl& m = *impl_;
  m.overlap = overlap;
  m.view = view;
  if (comm.memory_space() != comm::MemorySpace::device)
    throw UsageError("--device cuda needs the nccl communicator (the " + std::string(comm.backend()) +
                     " communicator takes host buffers)");
  m.stream = comm::nccl_compute_stream(comm);
  const uint32_t dp = static_cast<uint32_t>(comm.size());
  pipeline::RankPlan plan = pipeline::plan_rank(m.spec, m.cfg, static_cast<uint32_t>(comm.rank()), dp);
  m.state = std::move(plan.state);
  m.fp8 = std::move(plan.fp8);
  m.fp8_index = std::move(plan.fp8_index);
  m.lw_layout = std::move(plan.layer_wise);
  m.layout = std::move(plan.bucketed);
  if (m.lw_layout)
    m.lw = std::make_unique<DeviceLayerWisePart>(m.spec, *m.lw_layout, m.cfg, comm, m.state.layer_wise, m.fp8,
                                                 m.fp8_index, m.state.fp8, init, m.stream);
  if (m.layout.dp != dp) throw InternalError("pipeline: layout for another dp");

  m.build_storage();
  m.init_masters(init);
  m.build_tables();
  m.build_bucket_sync();
  m.scalar = DeviceBuffer(4, m.stream);
  Impl* const self = impl_.get();
  m.hooks.before_read = [self](uint32_t p) { self->before_read(p); };
  m.hooks.on_grad_ready = [self](uint32_t p) {
    if (self->bsync.grad_ready(p) && self->overlap.grad_reduce) self->issue_reduce_scatter(self->bsync.bucket_of(p));
  };

  m.build_views();
  m.copy_back_parts(false);
  m.issue_gathers();
  m.finish_param_sync();
  m.sync();
}

// The grad pointers, and where the network reads each param: values / param_ptrs (fp32 view) or
// values16 / param16_ptrs and scratch32 (bf16 view).
void DeviceRankPipeline::Impl::build_views() {
  Impl& m = *this;
  m.grad_ptrs.resize(m.spec.params.size());
  if (m.view == ParamView::bf16) {
    m.values16.resize(m.spec.params.size());
    m.param16_ptrs.resize(m.spec.params.size());
    uint64_t scratch = 0;
    for (uint32_t p = 0; p < m.spec.params.size(); ++p) {
      const uint64_t n = m.spec.params[p].numel();
      if (m.lw && m.lw->holds(p)) {
        m.grad_ptrs[p] = m.lw->grad_of(p);
        if (!m.lw->in_place(p)) scratch = std::max(scratch, n);
      } else {
        const Where& w = m.where[p];
        if (w.buffer < 0) throw InternalError("pipeline: no layout holds param " + m.spec.params[p].name);
        DeviceStorage& s = m.bufs[static_cast<size_t>(w.buffer)];
        m.grad_ptrs[p] = s.grad.as<float>() + w.begin;
        if (s.dtype == DType::BF16) {
          m.param16_ptrs[p] = s.data.as<uint16_t>() + w.begin;
          continue;
        }
        if (s.dtype == DType::U8) scratch = std::max(scratch, n);
      }
      m.values16[p] = DeviceBuffer(n * 2, m.stream);
      m.param16_ptrs[p] = m.values16[p].as<uint16_t>();
    }
    if (scratch) m.scratch32 = DeviceBuffer(scratch * 4, m.stream);
    return;
  }
  m.values.resize(m.spec.params.size());
  m.param_ptrs.resize(m.spec.params.size());
  for (uint32_t p = 0; p < m.spec.params.size(); ++p) {
    if (m.lw && m.lw->holds(p)) {
      m.grad_ptrs[p] = m.lw->grad_of(p);
      if (float* in_place = m.lw->in_place(p)) {
        m.param_ptrs[p] = in_place;
        continue;
      }
      m.values[p] = DeviceBuffer(m.spec.params[p].numel() * 4, m.stream);
      m.param_ptrs[p] = m.values[p].as<float>();
      continue;
    }
    const Where& w = m.where[p];
    if (w.buffer < 0) throw InternalError("pipeline: no layout holds param " + m.spec.params[p].name);
    DeviceStorage& s = m.bufs[static_cast<size_t>(w.buffer)];
    m.grad_ptrs[p] = s.grad.as<float>() + w.begin;
    if (s.dtype == DType::F32) {
      m.param_ptrs[p] = s.data.as<float>() + w.begin;
    } else {
      m.values[p] = DeviceBuffer(m.spec.params[p].numel() * 4, m.stream);
      m.param_ptrs[p] = m.values[p].as<float>();
    }
  }
}

DeviceRankPipeline::~DeviceRankPipeline() {
  // Nothing in flight on freed memory: the compute stream and the gathers left on the communication one.
  if (impl_ && impl_->stream) (void)cudaDeviceSynchronize();
}

const std::vector<const float*>& DeviceRankPipeline::params() const {
  if (impl_->view != ParamView::fp32)
    throw InternalError("device pipeline: params() of a pipeline built with bf16 param views (read bf16_params())");
  finish_param_sync();
  return impl_->param_ptrs;
}
const std::vector<const uint16_t*>& DeviceRankPipeline::bf16_params() const {
  if (impl_->view != ParamView::bf16)
    throw InternalError("device pipeline: bf16_params() of a pipeline built with fp32 param views (read params())");
  return impl_->param16_ptrs;
}
ParamView DeviceRankPipeline::param_view() const { return impl_->view; }
void DeviceRankPipeline::finish_param_sync() const { impl_->finish_param_sync(); }
const DeviceOverlap& DeviceRankPipeline::overlap() const { return impl_->overlap; }
const BucketSync& DeviceRankPipeline::bucket_sync() const { return impl_->bsync; }
cudaStream_t DeviceRankPipeline::stream() const { return impl_->stream; }
const model::ModelSpec& DeviceRankPipeline::spec() const { return impl_->spec; }
const pipeline::PipelineConfig& DeviceRankPipeline::config() const { return impl_->cfg; }
bool DeviceRankPipeline::is_fp8(uint32_t param) const { return impl_->fp8_index.at(param) >= 0; }

pipeline::StepReport DeviceRankPipeline::step(const pipeline::GradFn& grad_fn, uint64_t micro_batches,
                                              ParamReads reads) {
  impl_->reads = reads;
  return pipeline::run_step(*impl_, grad_fn, micro_batches);
}

const ParamHooks& DeviceRankPipeline::param_hooks() const { return impl_->hooks; }

void DeviceRankPipeline::Impl::forward_backward(const pipeline::GradFn& grad_fn) {
  bsync.begin_step();
  rs_works.clear();
  if (reads == ParamReads::complete) finish_param_sync();  // grad_fn reads params without before_read
  static const std::vector<const float*> none;
  grad_fn(view == ParamView::fp32 ? param_ptrs : none, grad_ptrs);  // bf16: it reads bf16_params()
  bsync.mark_grad_fn_returned();
  finish_param_sync();  // params a forward did not read: before the copy-back rewrites the buffers
}

void DeviceRankPipeline::Impl::reduce_grads() {
  for (uint32_t id = 0; id < bsync.buckets(); ++id)
    if (!bsync.reduce_scatter_issued(id)) issue_reduce_scatter(id);
  comm::wait_all(rs_works);
  rs_works.clear();
}

// /M fused with max|g| (one launch per part).
void DeviceRankPipeline::Impl::scale_grads(float divisor, pipeline::GradNorm& norm) {
  norm.local_max = cuda::scale_and_max_abs(*grads, divisor, norm.local_max, stream);
  if (lw) norm.local_max = lw->scale_and_max_abs(divisor, norm.local_max);
}

// Both in one synchronisation, for the bucketed part alone (the layer-wise part's grads have their
// own table and stream: they take the two calls).
bool DeviceRankPipeline::Impl::scale_grads_and_add_squares(float divisor, pipeline::GradNorm& norm) {
  if (lw) return false;
  const cuda::MaxAndSquares r = cuda::scale_max_and_squares(*grads, divisor, norm.local_max, stream);
  norm.local_max = r.max;
  norm.local_sum += r.sum;
  return true;
}

// The fixed-point squares (one launch per part).
void DeviceRankPipeline::Impl::add_squares(pipeline::GradNorm& norm) {
  norm.local_sum += cuda::scaled_squares(*grads, norm.exponent, stream);
  if (lw) norm.local_sum += lw->scaled_squares(norm.exponent);
}

// The bucketed grads are multiplied as the optimizer reads them (cuda::adam_step's grad_scale: the
// same products, no pass of their own); the layer-wise part clips its own.
void DeviceRankPipeline::Impl::clip(float coef) {
  clip_coef = coef;
  if (lw) lw->clip(coef);
}

// ONE fused optimizer launch over every owned fragment, then the layer-wise matrices.
void DeviceRankPipeline::Impl::step_optimizer() {
  pipeline::OptimizerState& st = state.bucketed;
  const pipeline::Hypers h = pipeline::make_hypers(cfg, st.kind);
  ++st.step;
  if (st.kind == optim::OptimizerKind::lion) cuda::lion_step(h.lion, *optim, stream, clip_coef);
  else cuda::adam_step(h.adam, st.step, *optim, stream, clip_coef);
  clip_coef = 1.0f;
  if (lw) lw->step_optimizer(pipeline::make_hypers(cfg, state.layer_wise.kind));
}

// The collectives alone, so that the phase's time gives the step's all-gather bandwidth; with
// param_gather their issuing, and the waits and decodes fall in the next forward.
void DeviceRankPipeline::Impl::gather() {
  issue_gathers();
  if (!overlap.param_gather)
    for (uint32_t id = 0; id < bsync.buckets(); ++id) wait_gather(id);
}

bool DeviceRankPipeline::Impl::decode() {
  if (overlap.param_gather) return false;  // on first read (before_read) or finish_param_sync
  finish_param_sync();
  return true;
}

pipeline::RankState DeviceRankPipeline::download_state() const {
  finish_param_sync();
  const Impl& m = *impl_;
  m.sync();
  pipeline::RankState out = m.state;
  pipeline::OptimizerState& st = out.bucketed;
  const size_t n = m.master.bytes() / 4;
  st.master = download(m.master.as<float>(), n, m.stream);
  if (m.has_exp_avg) st.exp_avg = download(m.exp_avg.as<float>(), n, m.stream);
  if (m.has_exp_avg_sq) st.exp_avg_sq = download(m.exp_avg_sq.as<float>(), n, m.stream);
  out.fp8 = m.fp8_dev->download(m.state.fp8, m.stream);
  if (m.lw) m.lw->download(out);  // the matrices' arenas and FP8 scales
  return out;
}

std::vector<uint8_t> DeviceRankPipeline::stored_bytes(uint32_t param) const {
  const Impl& m = *impl_;
  if (param >= m.spec.params.size()) throw InternalError("pipeline: no param #" + std::to_string(param));
  finish_param_sync();
  m.sync();
  if (m.lw && m.lw->holds(param)) return m.lw->stored_bytes(param);
  const Where& w = m.where[param];
  const DeviceStorage& s = m.bufs[static_cast<size_t>(w.buffer)];
  const uint64_t n = m.spec.params[param].numel();
  std::vector<uint8_t> out;
  switch (s.dtype) {
    case DType::BF16: out = download(s.data.as<uint8_t>() + w.begin * 2, n * 2, m.stream); break;
    case DType::F32: out = download(s.data.as<uint8_t>() + w.begin * 4, n * 4, m.stream); break;
    case DType::U8: {
      if (!s.data.empty()) pipeline::append_vec(out, download(s.data.as<uint8_t>() + w.begin, n, m.stream));
      if (!s.col.empty()) pipeline::append_vec(out, download(s.col.as<uint8_t>() + w.begin, n, m.stream));
      const uint32_t t = static_cast<uint32_t>(m.fp8_index[param]);
      const pipeline::Fp8ParamState st = m.fp8_dev->download(m.state.fp8, m.stream)[m.fp8[t].state];
      pipeline::append_fp8_state(out, st);
      break;
    }
    default: break;
  }
  return out;
}

const layout::BucketedLayout& DeviceRankPipeline::bucketed_layout() const { return impl_->layout; }
const layout::LayerWiseLayout* DeviceRankPipeline::layer_wise_layout() const { return impl_->lw_layout.get(); }

DeviceRankPipeline::StoredForm DeviceRankPipeline::stored_form(uint32_t param) const {
  const Impl& m = *impl_;
  if (param >= m.spec.params.size()) throw InternalError("pipeline: no param #" + std::to_string(param));
  StoredForm f;  // as BucketedPart::storage / LayerWisePart::storage
  f.numel = m.spec.params[param].numel();
  if (m.lw && m.lw->holds(param)) {
    m.lw->stored_form(param, f.dtype, f.data, f.col);
    return f;
  }
  const DeviceStorage& s = m.bufs[static_cast<size_t>(m.where[param].buffer)];
  f.dtype = s.dtype == DType::U8 ? pipeline::fp8_dtype(m.cfg.fp8.recipe.format) : s.dtype;
  f.data = !s.data.empty();
  f.col = !s.col.empty();
  return f;
}

void DeviceRankPipeline::download_param(uint32_t param, const pipeline::ParamStorage& host) const {
  const Impl& m = *impl_;
  const StoredForm f = stored_form(param);
  finish_param_sync();  // no gather still writing the bytes read here
  if (m.lw && m.lw->holds(param)) {
    m.lw->download_param(param, host.data, host.col);
    return;
  }
  const Where& w = m.where[param];
  const DeviceStorage& s = m.bufs[static_cast<size_t>(w.buffer)];
  const uint64_t elem = dtype_bits(f.dtype) / 8, bytes = f.numel * elem;
  if (f.data) copy_to_host(host.data, s.data.as<uint8_t>() + w.begin * elem, bytes, m.stream);
  if (f.col) copy_to_host(host.col, s.col.as<uint8_t>() + w.begin, bytes, m.stream);
}

void DeviceRankPipeline::upload(const pipeline::RankState& state, const std::vector<pipeline::ParamStorage>& host) {
  Impl& m = *impl_;
  const pipeline::OptimizerState& in = state.bucketed;
  const size_t n = m.master.bytes() / 4;
  if (state.rank != m.state.rank || in.fragments.size() != m.state.bucketed.fragments.size() ||
      in.master.size() != n || host.size() != m.spec.params.size())
    throw InternalError("device pipeline: the state to upload is not this rank's");
  m.finish_param_sync();  // no gather still writing the buffers overwritten here
  copy_to_device(m.master.get(), in.master.data(), n * 4, m.stream);
  if (m.has_exp_avg) copy_to_device(m.exp_avg.get(), in.exp_avg.data(), n * 4, m.stream);
  if (m.has_exp_avg_sq) copy_to_device(m.exp_avg_sq.get(), in.exp_avg_sq.data(), n * 4, m.stream);
  m.state.bucketed.step = in.step;
  m.state.layer_wise.step = state.layer_wise.step;
  m.fp8_dev->upload(state.fp8, m.stream);
  if (m.lw) m.lw->upload_state(state);
  for (uint32_t p = 0; p < m.spec.params.size(); ++p) {
    if (m.lw && m.lw->holds(p)) {
      m.lw->upload_param(p, host[p].data, host[p].col);
      continue;
    }
    const StoredForm f = stored_form(p);
    const Where& w = m.where[p];
    const DeviceStorage& s = m.bufs[static_cast<size_t>(w.buffer)];
    const uint64_t elem = dtype_bits(f.dtype) / 8, bytes = f.numel * elem;
    if (f.data) copy_to_device(s.data.as<uint8_t>() + w.begin * elem, host[p].data, bytes, m.stream);
    if (f.col) copy_to_device(s.col.as<uint8_t>() + w.begin, host[p].col, bytes, m.stream);
  }
  for (uint32_t p = 0; p < m.spec.params.size(); ++p) m.decode_param(p);
  m.sync();
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
