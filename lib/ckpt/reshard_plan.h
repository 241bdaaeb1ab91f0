// The plan of `fpgather reshard` (formats/fpckpt/reshard_target.h builds it, formats/fpckpt/reshard.h runs
// it): for every target rank, the keys it declares, the runs it writes, each run's one contiguous
// source range, and the padding it declares (recomputed from the target layout, never copied).
// Every run maps onto exactly one source range: a run is one fragment of one param's state, weight or
// FP8 key, and a param's values lie contiguously in the source whatever its layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/documents.h"
#include "ckpt/index.h"

namespace fpg::ckpt {

struct CopyRun {
  uint32_t key = 0;      // index into ReshardPlan::keys
  uint64_t lo = 0;       // target elements [lo, lo + numel)
  uint64_t numel = 0;
  uint32_t src_key = 0;  // index into the source index's keys
  uint64_t src_lo = 0;   // source elements [src_lo, src_lo + numel)
};

struct RankPlan {
  uint32_t rank = 0;
  std::vector<uint32_t> declares;  // keys (indices into ReshardPlan::keys), declaration order
  std::vector<CopyRun> runs;       // write order
  std::vector<Padding> padding;    // keys are indices into ReshardPlan::keys
};

struct ReshardPlan {
  std::vector<Key> keys;
  std::vector<RankPlan> ranks;  // one per target rank, ranks[r].rank == r
  Documents documents;          // the target's index documents
};

// A plan's size, as --dry-run reports it.
struct PlanSummary {
  uint64_t keys = 0, runs = 0, files = 0, padding = 0;
  uint64_t elements = 0;             // copied
  uint64_t bytes_written = 0;        // logical bytes of the copied elements
  uint64_t bytes_read = 0;           // stored bytes of every source chunk a run intersects (each once)
  uint64_t source_chunks = 0;        // distinct source chunks read
  uint64_t chunk_reads = 0;          // (run, source chunk) intersections
  uint64_t peak_memory = 0;          // estimate, see formats/fpckpt/reshard.h
  std::vector<uint64_t> rank_bytes;  // logical bytes per target rank
};

// Source chunks that intersect source elements [lo, hi) of `key`: indices into index.chunks, by
// offset. `by_key` is the key's chunks sorted by offset (CheckpointReader::chunks_of).
std::vector<uint32_t> intersecting_chunks(const Index& index, const std::vector<uint32_t>& by_key, uint64_t lo,
                                          uint64_t hi);

// Counts of `plan` against its source (bytes_read counts every intersecting chunk once).
// `by_key[k]`: source key k's chunks sorted by offset. peak_memory is left 0.
PlanSummary summarize(const ReshardPlan& plan, const Index& source, const std::vector<std::vector<uint32_t>>& by_key);

}  // namespace fpg::ckpt
