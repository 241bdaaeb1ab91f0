#include "comm/mpi_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "comm/comm_error.h"

namespace fpg::comm {
namespace {

int env_int(const char* const* names) {
  for (const char* const* n = names; *n; ++n)
    if (const char* v = std::getenv(*n)) return std::atoi(v);
  return -1;
}

const char* const kRankVars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", nullptr};
const char* const kSizeVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", nullptr};

}  // namespace

bool launched_by_mpi() { return launcher_size() > 0; }
int launcher_rank() { return env_int(kRankVars); }
int launcher_size() { return std::max(0, env_int(kSizeVars)); }

}  // namespace fpg::comm

#if defined(FPGATHER_HAVE_MPI)
#include <atomic>
#include <mutex>

namespace fpg::comm::mpi {
namespace {

std::once_flag g_init;
std::atomic<bool> g_failed{false};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_failed.load()) MPI_Finalize();
}

}  // namespace

void ensure_initialized() {
  std::call_once(g_init, [] {
    int initialized = 0;
    check(MPI_Initialized(&initialized), "MPI_Initialized");
    if (initialized) return;  // the embedding program owns MPI
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED)
      throw CommAborted("MPI provides thread level " + std::to_string(provided) +
                        ", below MPI_THREAD_SERIALIZED");
    std::atexit(finalize_at_exit);
  });
}

int world_rank() {
  ensure_initialized();
  int r = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &r), "MPI_Comm_rank");
  return r;
}

int world_size() {
  ensure_initialized();
  int n = 0;
  check(MPI_Comm_size(MPI_COMM_WORLD, &n), "MPI_Comm_size");
  return n;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommAborted(std::string(what) + " failed: " + std::string(msg, static_cast<size_t>(len)));
}

void mark_failed() { g_failed = true; }

}  // namespace fpg::comm::mpi
#endif
