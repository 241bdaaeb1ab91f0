// `fpgather bench gpu-optim`: the GPU optimizer kernels on one device (kernels/optim_fused.h,
// kernels/grad_norm.h, kernels/muon.h), timed with CUDA events (warm-up, then the median of
// `iters` launches):
//   copy       cudaMemcpyAsync device-to-device of a 1 GiB buffer: the roofline. GB/s counts the
//              bytes read plus the bytes written (2 per byte copied).
//   adamw/lion one fused multi-tensor step over every parameter of the model preset as one fragment
//              each (allocated 16-byte aligned, as a framework allocates tensors). AdamW reads p, g, m,
//              v and writes p, m, v: 28 B/element; Lion 20 B. ratio = GB/s / copy GB/s.
//   grad-norm  max |g| plus the exact 128-bit square sum over the same grads, as a one-rank step
//              runs them (cuda::scale_max_and_squares, N = 1): two reading passes over g (8 B/element)
//              and one copy of the results to the host. grad-norm-div: the same with the 1/N grad
//              averaging fused into the max pass (N = 2; read + write, then read: 12 B/element).
//              grad-max and grad-sq time each pass alone (4 B/element each), each with its own copy
//              of the result to the host, as a rank of a larger group runs them.
//   muon       one Muon step (momentum, 5 bf16 Newton–Schulz iterations on cuBLAS, update) of each
//              listed matrix, and of all the model's Muon matrices batched by shape; TFLOP/s counts
//              the NS GEMMs, N·(4m²n + 2m³) per matrix, m = min(A,B), n = max(A,B).
// scripts/bench_torch_optim.py times torch's fused AdamW and torch.optim.Muon on the same shapes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/model_spec.h"

namespace fpg::bench {

struct GpuOptimBenchOptions {
  model::ModelSpec spec;  // whose parameters are the fragments
  std::vector<std::pair<int64_t, int64_t>> muon_shapes = {{4096, 4096}, {4096, 14336}, {8192, 8192}};
  int warmup = 3;
  int iters = 20;
};

struct GpuTimedRow {
  std::string what;       // "copy", "adamw", "lion", "grad-norm", "grad-max", "grad-sq", "muon"
  std::string shape;      // muon: "4096x4096" or "model"; else ""
  int64_t matrices = 0;   // muon: matrices stepped
  int64_t elements = 0;
  uint64_t bytes = 0;     // bytes moved (see the header); 0 for muon
  double median_ms = 0, min_ms = 0;
  double gbps = 0;        // bytes / median
  double ratio_to_copy = 0;
  double tflops = 0;      // muon: NS GEMM FLOPs / median
  std::string gemm;       // muon: "cublasLt" (C and D apart) or "gemmex+copy" (the fallback)
};

struct GpuOptimBenchResult {
  std::string device;
  std::vector<std::vector<int64_t>> param_shapes;                 // the AdamW/Lion fragments
  std::vector<std::pair<int64_t, int64_t>> model_muon_shapes;     // the model's Muon matrices
  std::vector<GpuTimedRow> rows;
};

// Throws UsageError in a build without CUDA or on a machine without a GPU.
GpuOptimBenchResult run_gpu_optim_bench(const GpuOptimBenchOptions& opt);

}  // namespace fpg::bench
