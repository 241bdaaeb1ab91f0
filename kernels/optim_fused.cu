#include "kernels/optim_fused.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/float_codec.h"
#include "kernels/cuda_check.h"
#include "kernels/optim_table.h"
#include "optim/fragment_check.h"

namespace fpg::cuda {

// A fragment as the kernel sees it; param_numel is resolved (never -1).
struct DevFragment {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t numel;
  int64_t param_offset;
  int64_t param_numel;
  uint16_t* out16;  // bf16(new param), or null
};

struct FragmentTable::Impl {
  DeviceArray<DevFragment> frags;
  DeviceArray<Chunk> chunks;
  size_t count = 0;
  int64_t elements = 0;
  bool adam = true;
  bool out16 = false;
};

FragmentTable::FragmentTable(const optim::Fragment* fragments, size_t count, bool needs_exp_avg_sq,
                             const std::vector<uint16_t*>& bf16_out)
    : impl_(std::make_unique<Impl>()) {
  const char* who = needs_exp_avg_sq ? "cuda::adam_step" : "cuda::lion_step";
  if (!bf16_out.empty() && bf16_out.size() != count)
    throw InternalError(std::string(who) + ": " + std::to_string(bf16_out.size()) + " bf16 outputs for " +
                        std::to_string(count) + " fragments");
  std::vector<DevFragment> host(count);
  std::vector<int64_t> numels(count);
  for (size_t i = 0; i < count; ++i) {
    const optim::Fragment& f = fragments[i];
    const int64_t param_numel = optim::checked_param_numel(f, needs_exp_avg_sq, who);
    uint16_t* out16 = bf16_out.empty() ? nullptr : bf16_out[i];
    host[i] = DevFragment{f.param, f.grad, f.exp_avg, needs_exp_avg_sq ? f.exp_avg_sq : nullptr,
                          f.numel, f.param_offset, param_numel, out16};
    impl_->out16 |= out16 != nullptr;
    numels[i] = f.numel;
    impl_->elements += f.numel;
  }
  if (count > static_cast<size_t>(INT32_MAX)) throw UsageError(std::string(who) + ": too many fragments");
  const std::vector<Chunk> chunks = make_chunks(numels);
  if (chunks.size() > static_cast<size_t>(INT32_MAX)) throw UsageError(std::string(who) + ": too many chunks");
  impl_->frags.assign(host);
  impl_->chunks.assign(chunks);
  impl_->count = count;
  impl_->adam = needs_exp_avg_sq;
}

FragmentTable::~FragmentTable() = default;
FragmentTable::FragmentTable(FragmentTable&&) noexcept = default;
FragmentTable& FragmentTable::operator=(FragmentTable&&) noexcept = default;
size_t FragmentTable::fragments() const { return impl_->count; }
size_t FragmentTable::chunks() const { return impl_->chunks.size(); }
int64_t FragmentTable::elements() const { return impl_->elements; }
bool FragmentTable::has_exp_avg_sq() const { return impl_->adam; }
bool FragmentTable::writes_bf16() const { return impl_->out16; }

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Adam: kHasWd/kDecoupled specialise the decay branch away, as the CPU loops do.
template <bool kHasWd, bool kDecoupled>
struct AdamOp {
  optim::AdamScalars s;
  __device__ __forceinline__ void operator()(bool tail, float& p, float g, float& m, float& v) const {
    optim::AdamScalars t = s;
    t.has_wd = kHasWd;
    t.decoupled = kDecoupled;
    optim::adam_update(t, tail, p, g, m, v);
  }
};

struct LionOp {
  optim::LionScalars s;
  __device__ __forceinline__ void operator()(bool, float& p, float g, float& m, float&) const {
    optim::lion_update(s, p, g, m);
  }
};

// One block per chunk. Element i of the fragment is in its parameter's scalar tail (adam_math.h) when
// i >= tail; Lion ignores it. float4 loads when every stream of the chunk is 16-byte aligned (a chunk
// begins at a multiple of 4 elements), else a coalesced scalar loop. kOut16: fragments with out16
// also get bf16(new param) there (8-byte stores where aligned). grad_scale != 1: the gradient read is
// multiplied by it first, as a separate clip pass would have stored it (x * coef, rounded once).
template <bool kHasV, bool kOut16, typename Op>
__global__ void __launch_bounds__(kThreads) fused_kernel(const DevFragment* __restrict__ frags,
                                                         const Chunk* __restrict__ chunks, Op op, int vec_width,
                                                         float grad_scale) {
  const bool scaled = grad_scale != 1.0f;
  const Chunk c = chunks[blockIdx.x];
  const DevFragment f = frags[c.item];
  const int64_t tail_begin = optim::adam_tail_begin(f.param_numel, vec_width) - f.param_offset;
  float* __restrict__ p = f.p;
  const float* __restrict__ g = f.g;
  float* __restrict__ m = f.m;
  float* __restrict__ v = f.v;
  uint16_t* __restrict__ out16 = kOut16 ? f.out16 : nullptr;
  float dummy = 0.0f;
  int64_t i = c.begin;
  const bool vec = aligned16(p + c.begin) && aligned16(g + c.begin) && aligned16(m + c.begin) &&
                   (!kHasV || aligned16(v + c.begin));
  if (vec) {
    const int64_t n4 = (c.end - c.begin) / 4;
    for (int64_t k = threadIdx.x; k < n4; k += kThreads) {
      const int64_t e = c.begin + 4 * k;
      float4 P = *reinterpret_cast<const float4*>(p + e);
      float4 G = __ldg(reinterpret_cast<const float4*>(g + e));
      if (scaled) G = make_float4(G.x * grad_scale, G.y * grad_scale, G.z * grad_scale, G.w * grad_scale);
      float4 M = *reinterpret_cast<const float4*>(m + e);
      float4 V = kHasV ? *reinterpret_cast<const float4*>(v + e) : float4{0, 0, 0, 0};
      op(e + 0 >= tail_begin, P.x, G.x, M.x, V.x);
      op(e + 1 >= tail_begin, P.y, G.y, M.y, V.y);
      op(e + 2 >= tail_begin, P.z, G.z, M.z, V.z);
      op(e + 3 >= tail_begin, P.w, G.w, M.w, V.w);
      *reinterpret_cast<float4*>(p + e) = P;
      *reinterpret_cast<float4*>(m + e) = M;
      if (kHasV) *reinterpret_cast<float4*>(v + e) = V;
      if (kOut16 && out16) {
        const uint16_t b0 = bf16_from_float(P.x), b1 = bf16_from_float(P.y), b2 = bf16_from_float(P.z),
                       b3 = bf16_from_float(P.w);
        if ((reinterpret_cast<uintptr_t>(out16 + e) & 7) == 0) {
          *reinterpret_cast<uint2*>(out16 + e) = make_uint2(b0 | uint32_t{b1} << 16, b2 | uint32_t{b3} << 16);
        } else {
          out16[e] = b0, out16[e + 1] = b1, out16[e + 2] = b2, out16[e + 3] = b3;
        }
      }
    }
    i = c.begin + 4 * n4;
  }
  for (int64_t e = i + threadIdx.x; e < c.end; e += kThreads) {
    float P = p[e], M = m[e];
    float& V = kHasV ? v[e] : dummy;
    op(e >= tail_begin, P, scaled ? g[e] * grad_scale : g[e], M, V);
    p[e] = P;
    m[e] = M;
    if (kOut16 && out16) out16[e] = bf16_from_float(P);
  }
}

template <bool kHasV, typename Op>
void launch(const FragmentTable& t, Op op, int vec_width, float grad_scale, cudaStream_t stream) {
  const auto& im = t.impl();
  if (im.chunks.size() == 0) return;
  const unsigned blocks = static_cast<unsigned>(im.chunks.size());
  if (im.out16)
    fused_kernel<kHasV, true>
        <<<blocks, kThreads, 0, stream>>>(im.frags.get(), im.chunks.get(), op, vec_width, grad_scale);
  else
    fused_kernel<kHasV, false>
        <<<blocks, kThreads, 0, stream>>>(im.frags.get(), im.chunks.get(), op, vec_width, grad_scale);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adam_step(const optim::AdamHyper& h, int64_t step, const FragmentTable& table, cudaStream_t stream,
               float grad_scale) {
  if (step < 1) throw UsageError("cuda::adam_step: step must be >= 1 (got " + std::to_string(step) + ")");
  if (h.torch_vec_width < 1) throw UsageError("cuda::adam_step: torch_vec_width must be >= 1");
  if (!table.has_exp_avg_sq()) throw UsageError("cuda::adam_step: the table was built for Lion (no exp_avg_sq)");
  const optim::AdamScalars s = optim::adam_scalars(h, step);
  if (!s.has_wd) {
    launch<true>(table, AdamOp<false, false>{s}, h.torch_vec_width, grad_scale, stream);
  } else if (s.decoupled) {
    launch<true>(table, AdamOp<true, true>{s}, h.torch_vec_width, grad_scale, stream);
  } else {
    launch<true>(table, AdamOp<true, false>{s}, h.torch_vec_width, grad_scale, stream);
  }
}

void lion_step(const optim::LionHyper& h, const FragmentTable& table, cudaStream_t stream, float grad_scale) {
  launch<false>(table, LionOp{optim::lion_scalars(h)}, 1, grad_scale, stream);
}

}  // namespace fpg::cuda
