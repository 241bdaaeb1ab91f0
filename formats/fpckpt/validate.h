// `fpgather validate`: the index checksum, the index checks (ckpt/coverage.h), the data files'
// presence and sizes, the layout check when the index records a layout and an optimizer state
// layout, and with `data` every chunk re-read in parallel, its checksums verified and decoded.
//
// The commands that use a checkpoint (train --load, diff, convert, reshard) run the same checks
// without `data` first (require_valid) and refuse a checkpoint that fails them: reading one would
// otherwise turn missing state into zeros.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/index.h"
#include "ckpt/problem.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fpckpt/reader.h"

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
  ckpt::IndexChecksum index_checksum = ckpt::IndexChecksum::verified;
  bool chunk_checksums_bound = true;  // seeded with key and offset (format 2.0 on)
  uint64_t keys = 0, chunks = 0, padding = 0, files = 0;
  uint64_t chunks_read = 0, bytes_read = 0;  // with data
  std::vector<ckpt::Problem> problems;       // sorted by key and range
};

// FormatError if there is no readable index at `path` (exit 3); a newer version is reported as a
// `version` problem with readable = false, an altered index as an `index_checksum` problem.
ValidateReport validate_checkpoint(const std::string& path, const ValidateOptions& opts);

// The checks of validate_checkpoint without `data`, on an open reader (opened with
// IndexCheck::report, so that an altered index is reported rather than refused).
ValidateReport validate_index(const CheckpointReader& reader);

// A checkpoint that the index checks reject, refused by a command that would use it (exit 1).
struct InvalidCheckpoint : Error {
  explicit InvalidCheckpoint(const std::string& what) : Error(ExitCode::check_failed, what) {}
};

// Runs validate_index and throws InvalidCheckpoint if it finds problems: the message names the
// checkpoint and what was refused (`refusing`, e.g. "resume from it"), and lists the problems.
void require_valid(const CheckpointReader& reader, const std::string& refusing);

// Opens the checkpoint at `path` for a command that uses it and runs require_valid on it; with
// `validate` false (the `--no-validate` of salvage commands) the checks are skipped and an altered
// index is opened as it is, with a warning.
std::unique_ptr<CheckpointReader> open_valid(const std::string& path, const std::string& refusing, bool validate = true);

// One line on what a checkpoint's format cannot detect, or "" for the current format: format 1
// has no index checksum and its chunk checksums are not bound to key and offset.
std::string integrity_note(const ckpt::FormatVersion& v);

// The layout check from the index's documents: `layout` (lib/layout JSON) and `optimizer`
// {"state_layout": "bucket"|"model", "states": [...], optionally "matrix_states": [...] for the
// layer-wise matrices}. Sets `checked` when both are present.
std::vector<ckpt::Problem> check_recorded_layout(const ckpt::Index& index, bool& checked);

}  // namespace fpg::fpckpt
