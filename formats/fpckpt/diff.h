// `fpgather diff A B`: value-by-value comparison in model space. Keys are matched by name and compared
// over their flat extent where both hold data, so two DP layouts of the same state compare equal;
// padding is ignored, but data in one checkpoint where the other has padding is a difference.
// Bucket-layout optimizer state (ckpt/state_view.h) is compared per param as "optimizer/<param>/<state>"
// unless both checkpoints place every param's state alike in the same bucket keys, so checkpoints of
// different state layouts, bucket sizes or distributed optimizers compare too.
// Memory: two blocks of block_elems elements plus the readers' per-thread chunk buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "formats/fpckpt/reader.h"

namespace fpg::fpckpt {

struct DiffOptions {
  double rtol = 0, atol = 0;  // equal when |a - b| <= atol + rtol * |b| (NaN equals NaN)
  size_t max_reports = 5;     // first differences listed per key
  uint64_t block_elems = 1ull << 20;
  ThreadPool* pool = nullptr;
};

struct ValueDiff {
  uint64_t index = 0;  // flat element
  std::string a, b;    // the values as text
};

struct KeyDiff {
  std::string key;
  std::string what;  // "only in A", "only in B", "dtype", "shape", "kind", "coverage", "values"
  std::string detail;
  uint64_t differing = 0;  // elements (values, coverage)
  double max_abs = 0;      // largest |a - b| among float differences
  std::vector<ValueDiff> first;
  uint64_t lo = 0, hi = 0;  // values: the first and one past the last differing element
};

struct DiffReport {
  uint64_t keys_compared = 0, elements_compared = 0;
  bool model_space = false;  // bucket keys were compared per param
  std::vector<KeyDiff> diffs;  // by key name
  bool equal() const { return diffs.empty(); }
};

DiffReport diff_checkpoints(const CheckpointReader& a, const CheckpointReader& b, const DiffOptions& opts);

}  // namespace fpg::fpckpt
