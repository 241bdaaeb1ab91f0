// The working directory of a benchmark of `fpgather bench`: DIR/fpgather-bench-NAME-PID, created
// empty and removed with everything in it when the benchmark ends, also when it throws.
#pragma once

#include <string>

namespace fpg::bench {

class ScratchDir {
 public:
  // FormatError naming the path when it cannot be created (DIR missing, or not writable).
  ScratchDir(const std::string& dir, const std::string& name);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fpg::bench
