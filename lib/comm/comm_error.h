// The error a rank sees when its group can no longer complete collectives.
#pragma once

#include <exception>
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

}  // namespace fpg::comm
