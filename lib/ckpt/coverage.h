// Validation of a checkpoint index alone (no data read), O(n log n) in chunks + padding intervals:
//   - references: every chunk's run, every run's key and file, every padding's key exist;
//   - dtype: each run was written with its key's dtype (so one dtype per key), a storable dtype;
//   - shape: shapes whose product fits 64 bits; chunks on their run's chunk grid with the sizes that
//     grid implies; uncompressed chunks store exactly chunk_elems elements;
//   - coverage: every chunk and padding interval inside [0, numel), all pairwise disjoint, and
//     data ∪ padding = [0, numel) — reported as the exact gap/overlap ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/index.h"
#include "ckpt/problem.h"

namespace fpg::ckpt {

std::vector<Problem> check_index(const Index& index);

// Referenced files present in `dir` with their recorded sizes (one stat per file).
std::vector<Problem> check_files(const Index& index, const std::string& dir);

// A flat interval of one key, for the coverage sweep and its users (inspect, diff).
struct KeyInterval {
  uint64_t lo = 0, hi = 0;
  bool padding = false;
  uint32_t source = 0;  // chunk or padding index
};

// Per key, its chunks and padding sorted by (lo, hi): keys.size() lists. O(n log n).
std::vector<std::vector<KeyInterval>> intervals_by_key(const Index& index);

}  // namespace fpg::ckpt
