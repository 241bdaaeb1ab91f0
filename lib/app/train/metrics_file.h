// `fpgather train --metrics FILE.jsonl`: one JSON object per step (train::step_json), one per line,
// written and flushed as each step ends, so a crashed or interrupted run leaves every finished step
// on disk and `tail -f` follows a live one. Not atomic; complete once close() returns.
//
// A new run writes a new file: an existing one is refused unless replaced (MetricsMode::replace). A
// resumed run continues the file of the run it resumes (MetricsMode::resume): the lines of the steps
// before the resumed step are kept, those of later steps (a run that went on past its last
// checkpoint) are cut, and the new steps are appended.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "app/train/trainer.h"

namespace fpg::app::train {

enum class MetricsMode {
  create,   // a new file; UsageError if one exists
  replace,  // created or truncated
  resume,   // created, or continued at start_at()
};

class MetricsFile {
 public:
  // UsageError for a file that `mode` does not take (an existing one, to create).
  static void check(const std::string& path, MetricsMode mode);
  // Opens path as `mode` says (check() first); FormatError naming it when that fails.
  MetricsFile(std::string path, MetricsMode mode);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // Before the first write of a resumed run: cuts the file before its first line of a step at or
  // after `step` (or its first line that is not a step's), so that the next write follows step - 1.
  void start_at(uint64_t step);
  void write(const StepMetrics& m);  // FormatError on a failed write
  void close();                      // FormatError when the data did not reach the file

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace fpg::app::train
