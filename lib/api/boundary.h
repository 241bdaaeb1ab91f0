// The edge of the public API (lib/include/fpgather): every entry point runs its body through
// at_boundary, which sets up logging on first use and turns the library's errors into fpgather::Error
// with the same exit code, so no internal type crosses into a caller.
#pragma once

#include <exception>
#include <new>
#include <string>

#include <fpgather/error.h>
#include <fpgather/progress.h>

#include "core/error.h"
#include "core/progress.h"

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

// Runs `body` (an at_boundary call) with `progress`, where set, told of every advance of the work it
// starts (core/progress.h). When the callback throws, the work stops and unwinds, and its exception is
// rethrown here as the callback threw it, not as the library error that stopped the work.
template <class F>
auto with_progress(const ProgressCallback& progress, F&& body) -> decltype(body()) {
  if (!progress) return body();
  fpg::ProgressObserver observer([&progress](const std::string&, uint64_t done, uint64_t total) { progress(done, total); });
  auto result = [&] {
    try {
      return body();
    } catch (...) {
      if (const std::exception_ptr failure = observer.failure()) std::rethrow_exception(failure);
      throw;
    }
  }();
  // Work that turned the stop into a report of its own (a problem found) still fails with it.
  if (const std::exception_ptr failure = observer.failure()) std::rethrow_exception(failure);
  return result;
}

}  // namespace fpgather::api
