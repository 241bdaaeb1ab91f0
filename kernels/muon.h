// Muon on the GPU (lib/optim/muon.h is the CPU reference), batched over same-shape matrices: one
// elementwise kernel applies the momentum (muon_math.h, bitwise as the CPU) and writes the bf16 NS
// input, the NS iterations run as strided-batched cuBLAS GEMMs over the whole group
// (kernels/newton_schulz.h), one elementwise kernel applies decay and the scaled update. Include from
// plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/newton_schulz.h"
#include "optim/muon.h"

namespace fpg::cuda {

struct MuonMatrix {
  float* param = nullptr;       // device, rows × cols row-major fp32 master
  const float* grad = nullptr;  // device
  float* momentum = nullptr;    // device, zero before the first step
};

// A group of same-shape matrices stepped together, with its NS workspace and device pointer table.
class MuonGroup {
 public:
  MuonGroup(int64_t rows, int64_t cols, const std::vector<MuonMatrix>& matrices);
  ~MuonGroup();
  MuonGroup(MuonGroup&&) noexcept;
  MuonGroup& operator=(MuonGroup&&) noexcept;
  size_t size() const;
  const NsWorkspace& workspace() const;

  // One torch.optim.Muon step of every matrix of the group (NsPrecision::bf16 Newton–Schulz only;
  // UsageError for the identity orthogonalizer or fp32 NS). Asynchronous on `stream`.
  void step(const optim::MuonHyper& h, cublasHandle_t blas, cudaStream_t stream);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fpg::cuda
