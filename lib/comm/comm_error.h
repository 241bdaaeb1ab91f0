// The error a rank sees when its group can no longer complete collectives.
#pragma once

#include <exception>
#include <mutex>
#include <string>

#include "core/error.h"

namespace fpg::comm {

// A collective could not complete because the group was aborted: another rank failed or returned
// while this one waited, or a wait timed out. The root cause is reported by whoever ran the group
// (CommunicatorGroup::run rethrows the failing rank's own exception, not this one).
struct CommAborted : Error {
  explicit CommAborted(const std::string& what) : Error(ExitCode::internal, what) {}
};

// The message of a rank's failure, for the group's abort message.
inline std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Whether a rank failed only because the group was aborted (not the root cause).
inline bool is_abort(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const CommAborted&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The failures of a group's ranks, from their threads: the first root cause and the first abort; a
// group's run() rethrows the root cause when there is one (the aborts are its consequence).
class RankFailures {
 public:
  // Records a rank's exception; returns whether it was only the group's abort.
  bool record(const std::exception_ptr& e) {
    const bool aborted = is_abort(e);
    std::lock_guard<std::mutex> lk(mu_);
    std::exception_ptr& slot = aborted ? first_abort_ : first_error_;
    if (!slot) slot = e;
    return aborted;
  }
  // After every rank has returned.
  void rethrow_first() const {
    if (first_error_) std::rethrow_exception(first_error_);
    if (first_abort_) std::rethrow_exception(first_abort_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_error_, first_abort_;
};

}  // namespace fpg::comm
