// Creating the ranks of a communicator group by backend name and running code on each of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"

namespace fpg::comm {

// When the threads backend runs a collective (other backends ignore this).
enum class Completion : uint8_t {
  // Inside the issuing call; the returned handle is already done. The default: simplest to debug.
  immediate,
  // Only when this rank waits on its handle or a later one, or makes a blocking call (blob gathers),
  // or returns from its function; done() is false until then. Models an asynchronous backend: a
  // caller that reads an output or rewrites an input before wait() gets wrong results on CPU too.
  deferred,
};

struct CommOptions {
  Completion completion = Completion::immediate;
  // How long a rank may wait for the others to reach a collective before the group is aborted;
  // 0 = forever. A hang guard for tests and debugging; a rank computing for long is not waiting.
  std::chrono::milliseconds timeout{0};
};

// The ranks of one group that this process hosts, and the way to run code on them.
class CommunicatorGroup {
 public:
  virtual ~CommunicatorGroup() = default;

  virtual std::string_view backend() const = 0;
  // Ranks in the whole group.
  virtual int size() const = 0;

  // Calls fn(communicator) once for every rank this process hosts, each on its own thread (threads:
  // all ranks; NCCL single-process: one thread per GPU; under mpirun: this process's rank), and
  // returns when all have returned. If any rank throws, the group is aborted so that ranks waiting in
  // a collective throw CommAborted instead of hanging, and the first rank's own exception is rethrown
  // here (not a CommAborted, unless that is all there is). A rank returning while others still expect
  // it in a collective also aborts the group. Each run starts a fresh group state.
  virtual void run(const std::function<void(Communicator&)>& fn) = 0;
};

// Backend names make_communicator_group knows, and whether this build has them.
std::vector<std::string> communicator_backends();
bool communicator_backend_built(std::string_view backend);

// "threads": `size` ranks as threads of this process (size >= 1). "mpi": this process's rank of an
// mpirun job of `size` processes (comm/mpi_backend.h). "nccl": `size` local GPUs driven by this
// process, or under mpirun this process's GPU rank of `size` (comm/nccl_backend.h). A backend this
// build lacks, an unknown name and size < 1 are UsageErrors saying so.
std::unique_ptr<CommunicatorGroup> make_communicator_group(std::string_view backend, int size,
                                                           const CommOptions& options = {});

// A group for code that hands the communicator host buffers (the CPU pipelines of `train` and
// `step`): "threads" or "mpi". "nccl" is a UsageError (its buffers are device memory), and so is
// "threads" in a process that mpirun started among several (each process would run every rank).
std::unique_ptr<CommunicatorGroup> make_host_group(std::string_view backend, int size,
                                                   const CommOptions& options = {});

// Shorthand: make_communicator_group("threads", size, options)->run(fn).
void run_ranks(int size, const std::function<void(Communicator&)>& fn, const CommOptions& options = {});

}  // namespace fpg::comm
