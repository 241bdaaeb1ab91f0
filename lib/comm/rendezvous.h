// The barrier the ranks of a threads group meet at, which can be aborted so no rank waits forever.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace fpg::comm {

// A generation-counter barrier for n threads (mutex + condition variable; no sleeps, no spinning).
// The group is aborted by abort(), by a rank leaving (rank_left) while others wait or before they
// arrive, or by an abortable wait that exceeds the timeout; from then on abortable waits throw
// CommAborted with the first reason. Non-abortable waits are for the exit of a collective, where every
// rank is known to be coming and must not leave while others still read its buffers.
class Rendezvous {
 public:
  // timeout 0: abortable waits never time out.
  Rendezvous(int n, std::chrono::milliseconds timeout);

  // Blocks until all n ranks have arrived. `what` and `seq` name the collective in error messages.
  void arrive_and_wait(int rank, bool abortable, const char* what, uint64_t seq);

  // Marks the group failed; idempotent, the first reason is kept.
  void abort(const std::string& reason);

  // `rank` has returned from its function and will never arrive again.
  void rank_left(int rank);

  bool aborted() const;

 private:
  [[noreturn]] void throw_aborted_locked() const;
  void abort_locked(const std::string& reason);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  const std::chrono::milliseconds timeout_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  int left_ = 0;
  int first_left_ = -1;
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace fpg::comm
