// The metadata of a DCP checkpoint saved without collectives (`dcp.save(..., use_collectives=False)`):
// each rank commits its own `__<rank>.metadata`, describing only what that rank wrote, and no
// `.metadata` is written. torch loads such a checkpoint rank by rank; fpgather reads it as one, the
// ranks' metadata merged into the Metadata a coordinator would have written, so that it is validated
// (validate.h) by the same rules as a `.metadata`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/dcp/metadata/metadata.h"

namespace fpg::dcp {

// The rank of a file named `__<rank>.metadata` (decimal digits, no sign); nothing for other names
// and for a rank beyond what a checkpoint may hold.
std::optional<uint64_t> rank_metadata_rank(std::string_view name);
// "__<rank>.metadata".
std::string rank_metadata_name(uint64_t rank);

// One rank's decoded metadata.
struct RankMetadata {
  uint64_t rank = 0;
  Metadata metadata;
};

// The ranks' metadata, ascending by rank, as one Metadata named `file` in messages:
//   - a key held by several ranks must have the same kind, dtype and size in each (FormatError
//     naming both files and the key otherwise); its chunks are the union of theirs, where a chunk of
//     the same offsets and sizes as one an earlier rank wrote is that rank's replica (every rank that
//     holds a replicated tensor writes it when no coordinator dedups the plans) and the earlier
//     rank's is kept; other overlaps stay, for validation to report;
//   - a bytes entry held by several ranks is the lowest rank's;
//   - planner_data is the union (the lowest rank's path for a key), storage_meta, version and the
//     other top-level fields are the lowest rank's.
Metadata merge_rank_metadata(std::vector<RankMetadata> ranks, std::string file);

}  // namespace fpg::dcp
