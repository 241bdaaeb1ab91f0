#include "comm/group.h"

#include <fmt/format.h>

#include "comm/threads_backend.h"
#include "core/error.h"

namespace fpg::comm {

std::vector<std::string> communicator_backends() { return {"threads", "nccl", "mpi"}; }

bool communicator_backend_built(std::string_view backend) { return backend == "threads"; }

std::unique_ptr<CommunicatorGroup> make_communicator_group(std::string_view backend, int size,
                                                           const CommOptions& options) {
  if (backend == "threads") return make_threads_group(size, options);
  if (backend == "nccl")
    throw UsageError(
        "the nccl communicator is not built into this fpgather (it needs CUDA and NCCL); use threads");
  if (backend == "mpi")
    throw UsageError("the mpi communicator is not built into this fpgather (it needs MPI); use threads");
  throw UsageError(fmt::format("unknown communicator '{}' (known: threads, nccl, mpi)", backend));
}

void run_ranks(int size, const std::function<void(Communicator&)>& fn, const CommOptions& options) {
  make_communicator_group("threads", size, options)->run(fn);
}

}  // namespace fpg::comm
