// `fpgather bench io` (BENCHMARKS.md): checkpoint save/load throughput as a ratio to a plain large-file
// write/read (plain_io.h) measured in the same run on the same directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::bench {

struct IoBenchOptions {
  std::string dir = "/tmp";        // where the files go (removed afterwards)
  uint64_t bytes = 1ull << 30;     // state size
  uint64_t chunk_bytes = 4ull << 20;
  std::vector<std::string> compressions = {"none", "zstd:1"};
  uint32_t ranks = 8;              // the state is split over this many rank files
  uint32_t reps = 3;               // every measurement this many times, interleaved; medians reported
  bool borrowed = true;            // saves hand the state to RankWriter::write_borrowed (false: write, copying)
};

// One measurement over the reps: seconds and the pipeline breakdown are medians, ratios come from
// the medians, the peak memory is the largest of the reps.
struct IoBenchRow {
  std::string what;  // "plain write", "plain read", "save none", "load none", ...
  double seconds = 0, gbps = 0;
  double ratio = 0;           // gbps / plain write (saves) or plain read (loads)
  double compression = 1;     // logical / stored bytes (saves)
  double extra_peak_mb = -1;  // peak RSS during the row over the RSS before it, MB (-1: unknown)
  // Saves: where the time went (PipelineTimes of chunk_pipeline.h over this save; -1 otherwise):
  // producer copying into slots and waiting for one, encoding thread-seconds, writer thread busy.
  double copy_s = -1, wait_s = -1, encode_s = -1, write_s = -1;
  double ratio_to_none = -1;        // saves/loads of another encoding: gbps / that of "none" (-1: n/a)
  std::vector<double> rep_seconds;  // each rep's seconds, in run order
};

std::vector<IoBenchRow> run_io_bench(const IoBenchOptions& o);

}  // namespace fpg::bench
