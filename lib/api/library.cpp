// The public API's library-wide entry points (fpgather/library.h).
#include <fpgather/library.h>

#include "api/boundary.h"
#include "core/thread_pool.h"

namespace fpgather {

std::string version() { return FPGATHER_VERSION; }

void set_threads(std::size_t threads) {
  api::at_boundary([&] { fpg::ThreadPool::set_global_threads(threads); });
}

void set_log_level(const std::string& level) {
  api::translating_errors([&] { api::configure_logging(level); });
}

}  // namespace fpgather
