// NCCL, loaded on first use instead of linked (core/shared_library.h says why: it maps 180 MB into
// every process, and only `train --device cuda` and `bench comm` use it). This file defines the NCCL
// entry points the NCCL backend calls; each resolves the real one on its first call and forwards to
// it. nccl.h's declarations check every signature here at compile time. A host without NCCL gets a
// clear error from the first NCCL call, and every other command runs there unchanged.
#if defined(FPGATHER_HAVE_NCCL)
#include <nccl.h>

#include <string>

#include "core/shared_library.h"

namespace fpg::comm {
namespace {

// The soname of the major version of the headers fpgather was built with, searched as the loader
// does, then in the directory the build found NCCL in.
const SharedLibrary& nccl() {
  static const SharedLibrary lib(
      {"libnccl.so." + std::to_string(NCCL_MAJOR), std::string(FPGATHER_NCCL_DIR) + "/libnccl.so." + std::to_string(NCCL_MAJOR)},
      "NCCL " + std::to_string(NCCL_MAJOR) + ", needed by the nccl backend");
  return lib;
}

}  // namespace
}  // namespace fpg::comm

// Defines `name` with C linkage: the first call resolves NCCL's own `name`, every call forwards.
#define FPG_NCCL_FORWARD(name, params, args)                                   \
  extern "C" ncclResult_t name params {                                        \
    using Fn = ncclResult_t(*) params;                                         \
    static const Fn real = ::fpg::comm::nccl().function<Fn>(#name);            \
    return real args;                                                          \
  }

extern "C" const char* ncclGetErrorString(ncclResult_t result) {
  using Fn = const char* (*)(ncclResult_t);
  static const Fn real = ::fpg::comm::nccl().function<Fn>("ncclGetErrorString");
  return real(result);
}
FPG_NCCL_FORWARD(ncclGetUniqueId, (ncclUniqueId * id), (id))
FPG_NCCL_FORWARD(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank), (comm, nranks, id, rank))
FPG_NCCL_FORWARD(ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))
FPG_NCCL_FORWARD(ncclCommDestroy, (ncclComm_t comm), (comm))
FPG_NCCL_FORWARD(ncclCommAbort, (ncclComm_t comm), (comm))
FPG_NCCL_FORWARD(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * error), (comm, error))
FPG_NCCL_FORWARD(ncclGroupStart, (), ())
FPG_NCCL_FORWARD(ncclGroupEnd, (), ())
FPG_NCCL_FORWARD(ncclAllGather,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream),
                 (send, recv, count, type, comm, stream))
FPG_NCCL_FORWARD(ncclReduceScatter,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                  cudaStream_t stream),
                 (send, recv, count, type, op, comm, stream))
FPG_NCCL_FORWARD(ncclAllReduce,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                  cudaStream_t stream),
                 (send, recv, count, type, op, comm, stream))
FPG_NCCL_FORWARD(ncclBroadcast,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                  cudaStream_t stream),
                 (send, recv, count, type, root, comm, stream))
#endif
