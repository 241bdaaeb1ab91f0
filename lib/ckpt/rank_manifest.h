// What one rank wrote into a training checkpoint, in its own numbering: the committing rank merges
// every rank's manifest with the documents into the index (ckpt/state_store.h, StateSave::commit).
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/index.h"

namespace fpg::ckpt {

// Runs' `file` is 0 (this rank's file), runs' and padding's `key` index `keys`, chunks' `run` index
// `runs`.
struct RankManifest {
  uint32_t rank = 0;
  FileEntry file;  // name empty if the rank wrote no data
  std::vector<Key> keys;
  std::vector<Run> runs;
  std::vector<Chunk> chunks;
  std::vector<Padding> padding;
};

}  // namespace fpg::ckpt
