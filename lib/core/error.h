// Errors and the exit codes of the fpgather command line (lib/ARCHITECTURE.md).
#pragma once

#include <stdexcept>
#include <string>

namespace fpg {

// Process exit codes; every fpg::Error carries one so cmd/ can exit with it unchanged.
enum class ExitCode : int {
  ok = 0,
  check_failed = 1,  // a validation or comparison found a difference
  usage = 2,         // bad arguments, or an input the requested operation cannot take
  io = 3,            // input/output or format error (unreadable, malformed, truncated)
  internal = 4,      // a bug in fpgather
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Bad arguments or an input the operation cannot take (exit 2).
struct UsageError : Error {
  explicit UsageError(const std::string& what) : Error(ExitCode::usage, what) {}
};

// Malformed, truncated or unreadable input, or a failed write (exit 3).
struct FormatError : Error {
  explicit FormatError(const std::string& what) : Error(ExitCode::io, what) {}
};

// A well-formed input in a form fpgather does not read (exit 3): not a defect of the input, so
// validation reports it as unchecked rather than as a problem.
struct UnsupportedError : FormatError {
  explicit UnsupportedError(const std::string& what) : FormatError(what) {}
};

// A broken internal invariant (exit 4).
struct InternalError : Error {
  explicit InternalError(const std::string& what) : Error(ExitCode::internal, what) {}
};

}  // namespace fpg
