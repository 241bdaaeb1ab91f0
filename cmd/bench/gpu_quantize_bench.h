// `fpgather bench gpu-quantize`: the FP8 kernels on one GPU against a device-to-device cudaMemcpy
// timed in the same run (CUDA events, warm-up, median of the repetitions).
//   - per recipe, fp32 master -> FP8 + scales on one large tensor: the amax pass, the cast pass and
//     the whole quantization (amax, scales, cast), each as GB/s of the minimum bytes it must move
//     (read 4 B/element, write 1 B/element per direction, plus the scales) over the copy's GB/s;
//   - the batched copy-back over >= 1,000 parameters of mixed shapes (a model preset's parameters,
//     repeated): zero the amax grids, one launch of partial amaxes, one of scales, one of casts.
// Built without CUDA, it throws UsageError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::bench {

struct GpuQuantizeBenchOptions {
  uint64_t rows = 16384, cols = 16384;  // the single tensor (2^28 elements, 1 GiB of fp32)
  std::vector<std::string> recipes;     // names (below); empty: all
  std::string model = "base";           // preset whose parameter shapes the batched copy-back uses
  uint64_t min_params = 1000;           // the preset's parameters are repeated until there are this many
  int reps = 30;                        // timed repetitions per figure (after a warm-up)
  std::string shapes_json;              // when set, the batch's shapes are written there (torch script)
};

struct GpuQuantizeRow {
  std::string recipe;     // "memcpy", a recipe, or "batch:<recipe>"
  std::string pass;       // "copy", "amax", "cast", "quantize" (amax + scales + cast)
  uint64_t elements = 0;
  uint64_t bytes = 0;     // the minimum bytes the pass moves
  double median_ms = 0, best_ms = 0;
  double gbps = 0;        // bytes / median time
  double ratio = 0;       // gbps / the copy's gbps
};

struct GpuQuantizeReport {
  std::string device;
  uint64_t batch_params = 0, batch_elements = 0;
  std::vector<GpuQuantizeRow> rows;
};

// Recipe names: tensorwise, delayed, blockwise-1x128, blockwise, mxfp8, mxfp8-floor, mxfp8-both.
GpuQuantizeReport run_gpu_quantize_bench(const GpuQuantizeBenchOptions& opt);

}  // namespace fpg::bench
