// `fpgather reshard SRC DST --dp M ...` as a library: refuse an invalid source (index-only
// validation: index checksum, coverage, files, layout; InvalidCheckpoint, exit 1), plan (reshard_target.h), and unless
// dry_run stream the plan into DST (formats/fpckpt/reshard.h), committed atomically.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/chunk_codec.h"
#include "ckpt/reshard_plan.h"
#include "formats/fpckpt/reshard.h"
#include "formats/fpckpt/reshard_target.h"

namespace fpg::fpckpt {

struct ReshardRequest {
  std::string source, target;  // source: a checkpoint or a root holding `latest`
  ReshardOptions options;
  std::optional<ckpt::Compression> compression;  // default: the source's filters (zstd level 1 if it has zstd)
  uint64_t chunk_bytes = 0;                      // default: the source's largest chunk
  bool dry_run = false;
  bool progress = false;
  ThreadPool* pool = nullptr;  // default: the global pool
};

struct ReshardOutcome {
  std::string source_dir;                // after resolving `latest`
  std::vector<std::string> source_keys;  // the source's key names, by number (the plan's src_key)
  ReshardTarget target;
  ckpt::PlanSummary summary;  // with the peak memory estimate
  ReshardRunOptions run_options;
  std::optional<ReshardResult> result;  // unless dry_run
  double seconds = 0;                            // of the copy
};

ReshardOutcome reshard_checkpoint(const ReshardRequest& request);

}  // namespace fpg::fpckpt
