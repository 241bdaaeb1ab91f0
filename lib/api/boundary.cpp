#include "api/boundary.h"

#include <mutex>

#include "core/log.h"

namespace fpgather::api {
namespace {

std::mutex logging_mutex;
bool logging_configured = false;

}  // namespace

ErrorKind error_kind(fpg::ExitCode code) {
  switch (code) {
    case fpg::ExitCode::check_failed: return ErrorKind::check_failed;
    case fpg::ExitCode::usage: return ErrorKind::usage;
    case fpg::ExitCode::io: return ErrorKind::format;
    case fpg::ExitCode::ok:
    case fpg::ExitCode::internal: break;
  }
  return ErrorKind::internal;
}

void ensure_logging() {
  const std::lock_guard<std::mutex> lock(logging_mutex);
  if (logging_configured) return;
  fpg::init_logging("");
  logging_configured = true;
}

void configure_logging(const std::string& level) {
  const std::lock_guard<std::mutex> lock(logging_mutex);
  fpg::init_logging(level);
  logging_configured = true;
}

}  // namespace fpgather::api
