// Two checkpoints compared value by value in model space, as `fpgather diff` compares them: by key
// over each key's flat extent, padding ignored, bucket-layout optimizer state per parameter where the
// layouts differ; per parameter when either is a PyTorch DCP or Megatron torch_dist checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fpgather/checkpoint.h>

namespace fpgather {

struct DiffOptions {
  double rtol = 0, atol = 0;  // equal when |a - b| <= atol + rtol * |b| (NaN equals NaN)
  std::size_t max_reports = 5;  // first differing values listed per tensor
  // Refuse a checkpoint that fails validation's index (metadata) checks, with Error(check_failed);
  // false compares what a broken checkpoint still holds (a gap still fails its read).
  bool validate = true;
  // Tensors (names as the report gives them) left out: shell-style globs, `*` crossing dots, e.g.
  // "optim.param_groups.*" (`fpgather diff --ignore`).
  std::vector<std::string> ignore;
};

struct ValueDifference {
  uint64_t index = 0;  // flat element
  std::string a, b;    // the values as text
};

struct TensorDifference {
  std::string tensor;
  // "only in A", "only in B", "dtype", "shape", "kind", "coverage", "values", or "value" (a non-tensor
  // item of a DCP, param_groups say, compared by its decoded content)
  std::string what;
  std::string detail;
  uint64_t differing = 0;    // elements (values, coverage)
  double max_abs_diff = 0;   // largest |a - b| among float differences
  uint64_t lo = 0, hi = 0;   // values: the first and one past the last differing element
  std::vector<ValueDifference> first;
};

struct DiffReport {
  bool equal = true;
  bool model_space = false;  // compared per parameter rather than per stored key
  uint64_t tensors_compared = 0, elements_compared = 0;
  std::vector<TensorDifference> differences;  // by tensor name
};

DiffReport diff(const Checkpoint& a, const Checkpoint& b, const DiffOptions& options = {});

}  // namespace fpgather
