// Staging: what a writer creates beside its target while it writes it, renamed into place when
// complete, and what a writer that died (kill -9, power loss) leaves behind. Every writer names its
// staging after its target and holds an exclusive flock(2) on it while it lives:
//   ".NAME.tmp-<16 hex digits>"           a directory (fpckpt::begin_staging: checkpoints, DCP)
//   ".NAME.tmp-<digits>"                  a file (fs::create_temp_beside: safetensors, `latest`)
//   ".NAME.fpgather-staging-<6 letters>"  a directory (convert's outputs, app/convert/staged_output.h)
// Each writer removes the stale staging of its own target before it creates its own
// (remove_stale_staging_beside), and crash recovery of a checkpoint root (fpckpt/recovery.h) removes
// any in the root. Stale means all of: ours (owned by this user), a directory or regular file (never
// a link), not modified in the last kStagingGraceSeconds (a writer locks its staging a moment after
// creating it), and its lock can be taken (no live writer holds it). Where the file system offers no
// flock, staging is never taken for stale.
#pragma once

#include <string>
#include <vector>

namespace fpg::fs {

constexpr long kStagingGraceSeconds = 60;

// The name of the target whose staging `name` is (a directory, or a regular file), "" if `name` is
// no staging name of that kind.
std::string staging_target(const std::string& name, bool directory);

// Takes the writer's lock on open staging `fd` (exclusive, non-blocking flock). False where it
// cannot: the file system offers no flock (the staging is then never removed as stale).
bool lock_staging(int fd) noexcept;

// Removes `path` (a directory tree or a file) if it is stale staging as above; the lock is held
// while removing. Returns whether it was removed.
bool remove_if_stale_staging(const std::string& path) noexcept;

// Removes the stale staging of `target` beside it, each logged as a warning. Returns the names
// removed. Never throws.
std::vector<std::string> remove_stale_staging_beside(const std::string& target) noexcept;

}  // namespace fpg::fs
