#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

#include "core/error.h"
#include "core/progress.h"

namespace fpg {
namespace {

// Log lines share the terminal with the progress bar: each is written with the bar erased, and the bar
// is drawn again below it.
class ProgressAwareSink final : public spdlog::sinks::stderr_color_sink_mt {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    write_above_progress([&] { spdlog::sinks::stderr_color_sink_mt::log(msg); });
  }
};

}  // namespace

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
  auto logger = std::make_shared<spdlog::logger>("fpgather", std::make_shared<ProgressAwareSink>());
  spdlog::register_logger(logger);
  logger->set_pattern("fpgather: %^%l%$: %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace fpg
