// What `fpgather validate` (without --data) and `fpgather inspect` run on a checkpoint index, run on
// an index a fuzz target read: the index checks, the recorded layout check, the summary, the
// per-key chunk listing, the coverage intervals, and reads of every key through CheckpointReader
// (its data files are looked for in a directory that does not exist, so every chunk read takes the
// reader's error paths). Any exception but fpg::FormatError escapes, and libFuzzer reports it.
#pragma once

#include "ckpt/index.h"

namespace fpg::fuzz {

void run_index_checks(ckpt::Index index);

}  // namespace fpg::fuzz
