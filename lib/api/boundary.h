// The edge of the public API (lib/include/fpgather): every entry point runs its body through
// at_boundary, which sets up logging on first use and turns the library's errors into fpgather::Error
// with the same exit code, so no internal type crosses into a caller.
#pragma once

#include <exception>
#include <new>
#include <string>

#include <fpgather/error.h>

#include "core/error.h"

namespace fpgather::api {

ErrorKind error_kind(fpg::ExitCode code);

// Logging to stderr at FPGATHER_LOG's level (else warn) unless set_log_level has configured it.
void ensure_logging();
void configure_logging(const std::string& level);

// Runs `body`, rethrowing the library's errors as fpgather::Error (anything else but bad_alloc as an
// internal one).
template <class F>
auto translating_errors(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error&) {
    throw;
  } catch (const fpg::Error& e) {
    throw Error(error_kind(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::internal, e.what());
  }
}

template <class F>
auto at_boundary(F&& body) -> decltype(body()) {
  return translating_errors([&]() -> decltype(body()) {
    ensure_logging();
    return body();
  });
}

}  // namespace fpgather::api
