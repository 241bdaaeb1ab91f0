// The result of comparing two checkpoints value by value, and the element comparison every `diff`
// path shares (fpgather checkpoints key by key, any two checkpoints parameter by parameter).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace fpg {
class Progress;
}

namespace fpg::ckpt {

struct DiffOptions {
  double rtol = 0, atol = 0;  // equal when |a - b| <= atol + rtol * |b| (NaN equals NaN)
  size_t max_reports = 5;     // first differences listed per key
  uint64_t block_elems = 1ull << 20;
  ThreadPool* pool = nullptr;
  // The display the comparison advances by the bytes it reads of both sides (its total set when the
  // comparison is planned); none: no display.
  Progress* progress = nullptr;
  // Keys (names as the report gives them) left out of the comparison: shell-style globs (`*`, `?`,
  // `[...]`; `*` crosses dots), e.g. "optim.param_groups.*".
  std::vector<std::string> ignore;
};

// Whether `name` matches one of o.ignore.
bool ignored(const DiffOptions& o, const std::string& name);

struct ValueDiff {
  uint64_t index = 0;  // flat element
  std::string a, b;    // the values as text
};

struct KeyDiff {
  std::string key;
  std::string what;  // "only in A", "only in B", "dtype", "shape", "kind", "coverage", "values", "value"
                     // (an object's decoded content)
  std::string detail;
  uint64_t differing = 0;  // elements (values, coverage)
  double max_abs = 0;      // largest |a - b| among float differences
  std::vector<ValueDiff> first;
  uint64_t lo = 0, hi = 0;  // values: the first and one past the last differing element
};

struct DiffReport {
  uint64_t keys_compared = 0, elements_compared = 0;
  bool model_space = false;  // compared per parameter rather than per stored key
  std::vector<KeyDiff> diffs;  // by key name
  bool equal() const { return diffs.empty(); }
};

// Compares `n` elements of dtype `t` at `a` and `b`, the first being flat element `first`, and adds
// those that differ beyond the tolerances to `kd` (count, range, max |a - b|, the first few as text).
void compare_values(const uint8_t* a, const uint8_t* b, DType t, uint64_t first, uint64_t n, const DiffOptions& o,
                    KeyDiff& kd);

// kd.detail for a values difference found among `compared` elements.
void describe_values(KeyDiff& kd, uint64_t compared);

}  // namespace fpg::ckpt
