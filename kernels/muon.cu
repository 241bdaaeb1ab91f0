#include "kernels/muon.h"

#include <string>

#include "kernels/newton_schulz_impl.h"
#include "optim/muon_math.h"

namespace fpg::cuda {

struct MuonGroup::Impl {
  DeviceArray<MuonMatrix> mats;
  NsWorkspace ws;
  int64_t rows, cols;
  Impl(int64_t r, int64_t c, const std::vector<MuonMatrix>& m)
      : mats(m), ws(static_cast<int64_t>(m.size()), r, c), rows(r), cols(c) {}
};

MuonGroup::MuonGroup(int64_t rows, int64_t cols, const std::vector<MuonMatrix>& matrices) {
  if (matrices.empty()) throw UsageError("cuda::MuonGroup: no matrices");
  for (const MuonMatrix& m : matrices)
    if (!m.param || !m.grad || !m.momentum)
      throw UsageError("cuda::MuonGroup: missing parameter, gradient or momentum");
  impl_ = std::make_unique<Impl>(rows, cols, matrices);  // NsWorkspace checks the shape
}

MuonGroup::~MuonGroup() = default;
MuonGroup::MuonGroup(MuonGroup&&) noexcept = default;
MuonGroup& MuonGroup::operator=(MuonGroup&&) noexcept = default;
size_t MuonGroup::size() const { return impl_->mats.size(); }
const NsWorkspace& MuonGroup::workspace() const { return impl_->ws; }

namespace {

// Momentum (buf updated in place) and the matrix handed to NS, per element as muon_momentum.
struct MomentumSrc {
  const MuonMatrix* mats;
  optim::MuonScalars s;
  __device__ float operator()(int z, int64_t idx) const {
    const MuonMatrix m = mats[z];
    float buf = m.momentum[idx];
    const float u = optim::muon_momentum(s, m.grad[idx], buf);
    m.momentum[idx] = buf;
    return u;
  }
};

// Decay and the scaled orthogonalized update, per element as muon_apply.
struct ApplyDst {
  const MuonMatrix* mats;
  optim::MuonScalars s;
  __device__ void operator()(int z, int64_t idx, float o) const {
    float* p = mats[z].param + idx;
    float v = *p;
    optim::muon_apply(s, v, o);
    *p = v;
  }
};

}  // namespace

void MuonGroup::step(const optim::MuonHyper& h, cublasHandle_t blas, cudaStream_t stream) {
  if (h.orthogonalizer != optim::MuonOrthogonalizer::newton_schulz)
    throw UsageError("cuda::MuonGroup: the GPU Muon runs Newton-Schulz only (no identity orthogonalizer)");
  check_gpu_ns_options(h.ns, "cuda::MuonGroup");
  Impl& im = *impl_;
  NsWorkspace::Impl& w = im.ws.impl();
  const optim::MuonScalars s = optim::muon_scalars(h, im.rows, im.cols);
  to_x_kernel<<<tile_grid(w), tile_block(), 0, stream>>>(MomentumSrc{im.mats.get(), s}, w.rows, w.cols, w.tall, w.x,
                                                        w.partial);
  FPG_CUDA_CHECK_LAUNCH();
  ns_normalize_and_iterate(w, h.ns, blas, stream);
  from_x_kernel<<<tile_grid(w), tile_block(), 0, stream>>>(ApplyDst{im.mats.get(), s}, w.rows, w.cols, w.tall, w.x);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
