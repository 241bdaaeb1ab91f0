// The one exception the fpgather C++ API throws. Its kind is the exit code the fpgather command ends
// with for the same failure (fpgather(1), EXIT STATUS), so a program can treat both alike. Its message
// names an option by the field of the options struct that sets it ("give force to replace it"), where
// the command says the flag ("give --force …").
#pragma once

#include <stdexcept>
#include <string>

namespace fpgather {

enum class ErrorKind : int {
  check_failed = 1,  // a checkpoint that fails validation was refused by an operation that uses it
  usage = 2,         // bad arguments, or an input the operation cannot take
  format = 3,        // unreadable, malformed or truncated input, or a failed write
  internal = 4,      // a broken invariant inside fpgather
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }
  int exit_code() const noexcept { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

}  // namespace fpgather
