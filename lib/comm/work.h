// A handle on an issued collective, so callers can overlap communication with compute and wait later.
#pragma once

#include <memory>
#include <vector>

namespace fpg::comm {

// Completion contract, the same on every backend:
//  - Issuing a collective returns a Work; the collective may already be complete (the threads backend
//    in immediate mode) or may run later (NCCL streams, the threads backend in deferred mode).
//  - Until wait() returns, the caller must neither read the output nor modify the input buffers.
//  - After wait() returns, everything the caller does next sees the result: host code on a host
//    communicator; work enqueued on the rank's compute stream on a device communicator (there wait()
//    may return before the GPU has finished, as torch's Work.wait() does).
//  - Handles of one communicator may be waited in any order; waiting one also completes every
//    collective issued before it on that communicator.
//  - Errors surface either at the issuing call or at wait().
//  - Dropping a handle does not cancel the collective; it still runs in issue order.
//  - A handle must not outlive its communicator.
class Work {
 public:
  virtual ~Work() = default;

  // Blocks until the collective is complete (see above); rethrows its error, if any.
  virtual void wait() = 0;

  // A non-blocking poll. It never drives progress: on a backend that runs collectives only when
  // waited (threads, deferred) it stays false until a wait() at or after this collective.
  virtual bool done() = 0;
};

using WorkPtr = std::unique_ptr<Work>;

// Waits on every handle in order and clears the vector.
inline void wait_all(std::vector<WorkPtr>& works) {
  for (auto& w : works)
    if (w) w->wait();
  works.clear();
}

}  // namespace fpg::comm
