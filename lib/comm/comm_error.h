// The error a rank sees when its group can no longer complete collectives.
#pragma once

#include <string>

#include "core/error.h"

namespace fpg::comm {

// A collective could not complete because the group was aborted: another rank failed or returned
// while this one waited, or a wait timed out. The root cause is reported by whoever ran the group
// (CommunicatorGroup::run rethrows the failing rank's own exception, not this one).
struct CommAborted : Error {
  explicit CommAborted(const std::string& what) : Error(ExitCode::internal, what) {}
};

}  // namespace fpg::comm
