// Logging to stderr through spdlog; level from --log-level or the FPGATHER_LOG environment variable.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace fpg {

// Sets up the stderr logger. `level` is trace|debug|info|warn|error|off; empty means FPGATHER_LOG,
// else "warn". Throws UsageError for an unknown level.
void init_logging(const std::string& level);

}  // namespace fpg
