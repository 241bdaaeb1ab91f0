// `fpgather diff A B` over any two checkpoints fpgather reads: stored key by stored key where the
// format compares two of its own so (fpgather's: bucket-layout state per param; the capability
// Checkpoint::diff_stored), otherwise parameter by parameter (ckpt/param_diff.h).
#pragma once

#include <string>

#include "ckpt/value_diff.h"

namespace fpg::app::convert {

struct CheckpointDiff {
  ckpt::DiffReport report;
  // What was compared: an fpgather checkpoint's directory after resolving `latest`, a DCP path as given.
  std::string dir_a, dir_b;
};

// With `validate`, each side must pass the checks that need no data first (exit 1 with the
// problems); FormatError for a path that is no readable checkpoint.
// With `progress`, a display on stderr: the opening and validation as a phase, then a bar of the bytes
// compared (opts.progress is then this display).
CheckpointDiff diff_any(const std::string& a, const std::string& b, const ckpt::DiffOptions& opts, bool validate,
                        bool progress = false);

}  // namespace fpg::app::convert
