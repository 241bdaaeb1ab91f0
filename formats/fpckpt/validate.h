// `fpgather validate`: the index checks (ckpt/coverage.h), the data files' presence and sizes, the
// layout check when the index records a layout and an optimizer state layout, and with `data` every
// chunk re-read in parallel, its checksums verified and decoded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/index.h"
#include "ckpt/problem.h"
#include "core/thread_pool.h"

namespace fpg::fpckpt {

struct ValidateOptions {
  bool data = false;      // re-read and decode every chunk
  bool progress = false;  // progress bar for --data
  ThreadPool* pool = nullptr;
};

struct ValidateReport {
  std::string dir;  // the checkpoint directory (after resolving `latest`)
  ckpt::FormatVersion version;
  bool readable = true;  // false: the index has a version this reader cannot read (problems say so)
  bool layout_checked = false;
  uint64_t keys = 0, chunks = 0, padding = 0, files = 0;
  uint64_t chunks_read = 0, bytes_read = 0;  // with data
  std::vector<ckpt::Problem> problems;       // sorted by key and range
};

// FormatError if there is no readable index at `path` (exit 3); a newer version is reported as a
// `version` problem with readable = false.
ValidateReport validate_checkpoint(const std::string& path, const ValidateOptions& opts);

// The layout check from the index's documents: `layout` (lib/layout JSON) and `optimizer`
// {"state_layout": "bucket"|"model", "states": [...], optionally "matrix_states": [...] for the
// layer-wise matrices}. Sets `checked` when both are present.
std::vector<ckpt::Problem> check_recorded_layout(const ckpt::Index& index, bool& checked);

}  // namespace fpg::fpckpt
