// The library as a whole: its version, and the process-wide settings that the fpgather command takes
// as global options (--threads, --log-level).
#pragma once

#include <cstddef>
#include <string>

namespace fpgather {

// "MAJOR.MINOR.PATCH" of the library linked in.
std::string version();

// Worker threads of the operations that run in parallel (checkpoint reads and writes, validation with
// data, exports); 0: one per hardware thread. Replaces the pool: call it before starting work.
void set_threads(std::size_t threads);

// What the library logs to stderr: trace, debug, info, warn, error or off; "" means the FPGATHER_LOG
// environment variable, else warn. The library logs through spdlog's default logger, which its first
// call sets up with "" unless this was called before. Error(usage) for another name.
void set_log_level(const std::string& level);

}  // namespace fpgather
