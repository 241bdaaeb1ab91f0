// `fpgather bench quantize`: each FP8 recipe quantizing one large tensor, against a memcpy of the
// same input bytes timed in the same process with the same threads (BENCHMARKS.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8/recipe.h"

namespace fpg::bench {

struct QuantizeBenchOptions {
  uint64_t rows = 8192, cols = 8192;      // the tensor (M, K); both multiples of 128 keep every recipe
  std::vector<fp8::Input> inputs = {fp8::Input::f32, fp8::Input::bf16};
  std::vector<size_t> threads = {1};      // thread counts to measure
  std::vector<std::string> recipes;       // names (fp8::parse_scaling, plus "mxfp8-both"); empty: all
  double min_seconds = 0.5;               // per measurement
};

struct QuantizeBenchRow {
  std::string recipe;                     // "memcpy" for the baseline rows
  fp8::Input input = fp8::Input::f32;
  size_t threads = 1;
  uint64_t input_bytes = 0;
  double best_s = 0, median_s = 0;
  double gbps = 0;                        // input bytes / best time
  double ratio_to_memcpy = 0;             // gbps / memcpy gbps (same input, same threads)
  double speedup_vs_1_thread = 0;         // best time with 1 thread / this one (0 when 1 was not run)
};

std::vector<QuantizeBenchRow> run_quantize_bench(const QuantizeBenchOptions& opt);

}  // namespace fpg::bench
