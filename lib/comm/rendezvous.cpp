#include "comm/rendezvous.h"

#include <fmt/format.h>

#include "comm/comm_error.h"

namespace fpg::comm {

Rendezvous::Rendezvous(int n, std::chrono::milliseconds timeout) : n_(n), timeout_(timeout) {}

void Rendezvous::arrive_and_wait(int rank, bool abortable, const char* what, uint64_t seq) {
  std::unique_lock<std::mutex> lk(mu_);
  if (abortable) {
    if (aborted_) throw_aborted_locked();
    // A rank that has returned will never arrive: fail now rather than wait for it.
    if (left_ > 0)
      abort_locked(fmt::format("rank {} returned from its function while rank {} waits in {} (collective #{})",
                               first_left_, rank, what, seq));
    if (aborted_) throw_aborted_locked();
  }
  const uint64_t gen = generation_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  const auto passed = [&] { return generation_ != gen; };
  if (!abortable) {
    cv_.wait(lk, passed);
    return;
  }
  const auto released = [&] { return passed() || aborted_; };
  if (timeout_.count() > 0) {
    if (!cv_.wait_for(lk, timeout_, released))
      abort_locked(fmt::format("rank {} waited more than {} ms for the other ranks in {} (collective #{})",
                               rank, timeout_.count(), what, seq));
  } else {
    cv_.wait(lk, released);
  }
  if (passed()) return;  // completed before the abort: this collective still counts
  --arrived_;
  throw_aborted_locked();
}

void Rendezvous::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  abort_locked(reason);
}

void Rendezvous::rank_left(int rank) {
  std::lock_guard<std::mutex> lk(mu_);
  if (left_++ == 0) first_left_ = rank;
  if (arrived_ > 0)
    abort_locked(fmt::format("rank {} returned from its function while other ranks wait in a collective",
                             rank));
}

bool Rendezvous::aborted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return aborted_;
}

void Rendezvous::throw_aborted_locked() const {
  throw CommAborted("communicator group aborted: " + reason_);
}

void Rendezvous::abort_locked(const std::string& reason) {
  if (aborted_) return;
  aborted_ = true;
  reason_ = reason;
  cv_.notify_all();
}

}  // namespace fpg::comm
