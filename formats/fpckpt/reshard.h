// Running a reshard plan (ckpt/reshard_plan.h): every target rank's runs are streamed from the
// source in pieces of at most threads x chunk bytes (each one dataset of the target), read in
// batches of consecutive pieces of at most as many bytes (and an eighth of the copy; the first
// batches grow from one source chunk and the last ones shrink to one, so that the writes start
// early and the reads end late) — the source chunks a batch intersects are read and decoded in parallel (checksums checked), each once: a chunk only partly used stays in a
// small cache of decoded chunks for the next batch — and written with the rank writer straight from
// the batch's buffer (chunked and checksummed in parallel; uncompressed chunks written in parallel at
// addresses allocated with their dataset, rank_writer.h). A reader thread reads batch i + 1 while
// batch i is written, so reads and writes overlap: its pool of `threads` threads preads and checks
// the batch's chunks in parallel, outside the HDF5 mutex (reader.h), and the disk reads ahead of it
// (read_ahead.h: the next pieces' chunks, at least 64 MiB, into the page cache), so it never waits
// for the reader to ask. Padding is declared as the plan says. The ranks' pieces come one rank after
// another: once a rank's last batch is written its file is closed and fsynced in the background
// (CheckpointWriter::finish_rank) while the next ranks are written. The target is committed
// atomically (commit.h: staging directory, fsync, rename); on any failure the staging directory is
// removed and nothing is left at the target.
//
// Memory: three batch buffers, the writer's per-thread chunk buffers (3 chunks), the reader's
// per-thread buffers (about 4 source chunks) and the cache; independent of the checkpoint's size.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/index.h"
#include "core/progress.h"
#include "ckpt/reshard_plan.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/rank_writer.h"

namespace fpg::fpckpt {

struct ReshardRunOptions {
  WriteOptions write;      // compression, target chunk size, pool
  uint64_t piece_bytes = 0;  // bytes per write call; 0: threads x chunk_bytes (at least one source chunk)
  size_t cache_chunks = 0;   // decoded source chunks kept; 0: 2 x threads + 2
  bool progress = false;
  // With progress: the display to advance, whose phase (the source's validation and the plan) the
  // copy's bar replaces; none: the copy draws one of its own.
  Progress* bar = nullptr;
};

struct ReshardResult {
  ckpt::Index index;            // the committed target index
  uint64_t bytes_written = 0;   // logical
  uint64_t bytes_stored = 0;    // as stored after compression
  uint64_t chunks_decoded = 0;  // source chunks read and decoded (a chunk read twice counts twice)
  uint64_t bytes_read = 0;      // stored bytes of those
};

// Estimated peak memory of run_reshard beyond the two indexes (bytes).
uint64_t reshard_memory_estimate(const ckpt::Index& source, const ReshardRunOptions& opts);

// Writes the target checkpoint `target` (must not exist: UsageError) from `source` as `plan` says.
ReshardResult run_reshard(const CheckpointReader& source, const ckpt::ReshardPlan& plan, const std::string& target,
                          const ReshardRunOptions& opts);

}  // namespace fpg::fpckpt
