// A rank's manifest as bytes, so that ranks in other threads or processes can hand what they wrote
// to the committing rank through Communicator::gather_bytes (app/checkpoint/checkpointing.h). Little-endian,
// versionless: both ends are the same build.
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/rank_manifest.h"

namespace fpg::ckpt {

std::vector<uint8_t> manifest_to_bytes(const RankManifest& m);
// InternalError if the bytes are truncated or malformed.
RankManifest manifest_from_bytes(const std::vector<uint8_t>& bytes);

}  // namespace fpg::ckpt
