// Crash recovery of a checkpoint root (the --save DIR of `fpgather train`): what a killed or failed
// save leaves behind, put right before the root is used again (train runs it on its --save and
// --load roots before it loads or saves anything).
//
// - The staging of dead writers is removed (core/staging.h: ours, a minute old, its writer's lock
//   free): a save's ".NAME.tmp-<16 hex digits>" (commit.h StagingDir), a ".latest.tmp-<digits>"
//   left by a replacement of `latest` cut short, any other writer's. Staging whose lock cannot be
//   tried (a file system without flock) is left alone.
// - Deletions cut short are finished: ".NAME.deleting" directories (retention renames a checkpoint
//   so before deleting it), and "step-N" directories without index.h5 that hold nothing but rank
//   data files (an older fpgather deleted checkpoints in place).
// - A committed "step-N" newer than the one `latest` names (the save was killed between its rename
//   and the update of `latest`, or `latest` could not be written) is complete by construction: if
//   validation's index checks pass, `latest` is pointed at it (adopted); if not, it is renamed
//   ".step-N.invalid" (set aside) and the next newer one is considered.
#pragma once

#include <string>
#include <vector>

namespace fpg::fpckpt {

// ".NAME" + this: a newer checkpoint that failed validation, set aside by recovery.
constexpr const char* kInvalidSuffix = ".invalid";

// Recovers the checkpoint root `root` as above (nothing if it is not a directory). Returns one line
// per action taken (also logged as a warning). Never removes a checkpoint that `latest` names or any
// complete checkpoint; FormatError only if `latest` cannot be rewritten.
std::vector<std::string> recover_root(const std::string& root);

}  // namespace fpg::fpckpt
