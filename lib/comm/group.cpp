#include "comm/group.h"

#include <fmt/format.h>

#include "comm/mpi_backend.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_backend.h"
#include "comm/threads_backend.h"
#include "core/error.h"

namespace fpg::comm {

std::vector<std::string> communicator_backends() { return {"threads", "nccl", "mpi"}; }

bool communicator_backend_built(std::string_view backend) {
  if (backend == "threads") return true;
#if defined(FPGATHER_HAVE_NCCL)
  if (backend == "nccl") return true;
#endif
#if defined(FPGATHER_HAVE_MPI)
  if (backend == "mpi") return true;
#endif
  return false;
}

std::unique_ptr<CommunicatorGroup> make_communicator_group(std::string_view backend, int size,
                                                           const CommOptions& options) {
  if (backend == "threads") return make_threads_group(size, options);
  if (backend == "nccl") return make_nccl_group(size, options);
  if (backend == "mpi") return make_mpi_group(size, options);
  throw UsageError(fmt::format("unknown communicator '{}' (known: threads, nccl, mpi)", backend));
}

std::unique_ptr<CommunicatorGroup> make_host_group(std::string_view backend, int size,
                                                   const CommOptions& options) {
  if (backend == "nccl")
    throw UsageError(Message(Field{"comm"}, " nccl: the nccl communicator takes device buffers and this pipeline runs "
                             "on host memory; use ", Field{"comm"}, " threads, or ", Field{"comm"}, " mpi under mpirun"));
  if (backend == "threads" && launcher_size() > 1)
    throw UsageError(Message(Field{"comm"}, fmt::format(" threads under mpirun: each of the {} processes would run all "
                                                        "{} ranks; use ", launcher_size(), size),
                             Field{"comm"}, " mpi (one rank per process)"));
  return make_communicator_group(backend, size, options);
}

void run_ranks(int size, const std::function<void(Communicator&)>& fn, const CommOptions& options) {
  make_communicator_group("threads", size, options)->run(fn);
}

}  // namespace fpg::comm
