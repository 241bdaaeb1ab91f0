#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

#include "core/error.h"

namespace fpg {

void init_logging(const std::string& requested) {
  std::string level = requested;
  if (level.empty()) {
    const char* env = std::getenv("FPGATHER_LOG");
    level = env != nullptr ? env : "warn";
  }
  const auto lvl = spdlog::level::from_str(level);
  // from_str maps anything unknown to "off"; only accept "off" when asked for.
  if (lvl == spdlog::level::off && level != "off")
    throw UsageError("unknown log level '" + level + "' (trace, debug, info, warn, error, off)");
  spdlog::drop("fpgather");
  auto logger = spdlog::stderr_color_mt("fpgather");
  logger->set_pattern("fpgather: %^%l%$: %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace fpg
