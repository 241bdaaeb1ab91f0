// Errors and the exit codes of the fpgather command line (lib/ARCHITECTURE.md).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fpg {

// Process exit codes; every fpg::Error carries one so cmd/ can exit with it unchanged.
enum class ExitCode : int {
  ok = 0,
  check_failed = 1,  // a validation or comparison found a difference
  usage = 2,         // bad arguments, or an input the requested operation cannot take
  io = 3,            // input/output or format error (unreadable, malformed, truncated)
  internal = 4,      // a bug in fpgather
};

// An option named in a message by its field, as the library's callers set it: Field{"save"}.
struct Field {
  std::string name;
};

// A message that names options by their fields, recording where each stands, so that a caller that
// knows an option by another name (the command line's flag: cmd/cli.h) can say it so; every other
// caller reads the field. Message(Field{"save"}, " ", root, ": not a directory").
class Message {
 public:
  struct Mention {
    size_t at = 0;  // the field's name is text()[at, at + field.size())
    std::string field;
  };
  template <class... Parts>
  explicit Message(const Parts&... parts) {
    (add(parts), ...);
  }
  const std::string& text() const { return text_; }
  const std::vector<Mention>& mentions() const { return mentions_; }

 private:
  void add(std::string_view text) { text_ += text; }
  void add(const Field& f) {
    mentions_.push_back({text_.size(), f.name});
    text_ += f.name;
  }

  std::string text_;
  std::vector<Mention> mentions_;
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Error(ExitCode code, const Message& what) : std::runtime_error(what.text()), code_(code), fields_(what.mentions()) {}
  ExitCode code() const { return code_; }
  // Where what() names options by their fields (empty for a message built as plain text).
  const std::vector<Message::Mention>& fields() const { return fields_; }

 private:
  ExitCode code_;
  std::vector<Message::Mention> fields_;
};

// Bad arguments or an input the operation cannot take (exit 2).
struct UsageError : Error {
  explicit UsageError(const std::string& what) : Error(ExitCode::usage, what) {}
  explicit UsageError(const Message& what) : Error(ExitCode::usage, what) {}
};

// Malformed, truncated or unreadable input, or a failed write (exit 3).
struct FormatError : Error {
  explicit FormatError(const std::string& what) : Error(ExitCode::io, what) {}
  explicit FormatError(const Message& what) : Error(ExitCode::io, what) {}
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
