// `fpgather bench io` and `fpgather bench validate` (BENCHMARKS.md): checkpoint save/load throughput
// as a ratio to a plain large-file write/read measured in the same run on the same directory, and
// index-only validation speed and index size on a synthetic index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::fpckpt {

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

// The disk baseline of `bench io`, `bench reshard` and `bench export`: `bytes` of optimizer-like
// floats written to one file in `dir` in 64 MiB writes + fsync, evicted from the page cache, read
// back cold; with `duplex`, then that file read cold again while as many bytes are written + fsynced
// to a second file, at once (what the disk does when reading and writing together, as a copy must).
// The files are removed. Seconds of each.
struct PlainIo {
  uint64_t bytes = 0;
  double write_s = 0, read_s = 0;
  double duplex_s = 0;  // both the read and the write+fsync done (0: not measured)
  double write_gbps() const { return write_s > 0 ? bytes / write_s / 1e9 : 0; }
  double read_gbps() const { return read_s > 0 ? bytes / read_s / 1e9 : 0; }
  // Bytes per second each way while reading and writing at once.
  double duplex_gbps() const { return duplex_s > 0 ? bytes / duplex_s / 1e9 : 0; }
};
PlainIo measure_plain_io(const std::string& dir, uint64_t bytes, bool duplex = false);

// Drops a file's pages (or every file's under a directory) from the page cache, so that reads come
// from the disk (no root needed).
void evict_path(const std::string& path);

struct ValidateBenchOptions {
  std::string dir = "/tmp";
  uint64_t chunks = 1'000'000;
  uint32_t keys = 1000;
  uint32_t ranks = 8;
};

struct ValidateBenchResult {
  uint64_t chunks = 0, keys = 0, runs = 0, padding = 0;
  uint64_t index_bytes = 0;
  double write_s = 0, read_s = 0, check_s = 0, files_s = 0;
  double total_s() const { return read_s + check_s + files_s; }
  double chunks_per_s() const { return total_s() > 0 ? chunks / total_s() : 0; }
  double bytes_per_chunk() const { return chunks ? static_cast<double>(index_bytes) / chunks : 0; }
  uint64_t problems = 0;
};

ValidateBenchResult run_validate_bench(const ValidateBenchOptions& o);

}  // namespace fpg::fpckpt
