// `fpgather train --metrics FILE.jsonl`: one JSON object per step (train::step_json), one per line,
// written and flushed as each step ends, so a crashed or interrupted run leaves every finished step
// on disk and `tail -f` follows a live one. Not atomic; complete once close() returns.
#pragma once

#include <cstdio>
#include <string>

#include "app/train/trainer.h"

namespace fpg::app::train {

class MetricsFile {
 public:
  // Creates or truncates path; FormatError naming it when that fails.
  explicit MetricsFile(std::string path);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  void write(const StepMetrics& m);  // FormatError on a failed write
  void close();                      // FormatError when the data did not reach the file

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace fpg::app::train
