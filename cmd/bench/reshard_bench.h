// `fpgather bench reshard` (BENCHMARKS.md): in one run, the disk's plain write+fsync and cold read
// bandwidth (plain_io.h) and the reshard of uncompressed training checkpoints of one or more presets
// (e.g. small and base), each saved after one training step as `fpgather train --steps 1 --save`
// saves it, evicted from the page cache, then resharded as `fpgather reshard` does it: wall time,
// throughput (bytes written / s) as a ratio to min(read, write) of the plain file, and the peak RSS
// while resharding (peak_rss.h: reset to the RSS before the reshard, so the training before it is not
// counted) — measured at two sizes to show it does not grow with them. Beside it, the "duplex" disk
// figure: the plain file read cold while a second one is written + fsynced at once — what this disk
// gives a copy that reads and writes together — measured once at the plain size and again, after
// each reshard, at that reshard's own size (as `bench export` measures its baseline): a copy of a
// fraction of a second pays a file's creation and fsync as the plain copy of as many bytes does.
// Megatron cases (`--megatron dp tp full`): a synthetic TP 2 x PP 2 x DP 2 dp_reshardable torch_dist
// checkpoint (synthetic_megatron.h, hidden 1024 as scripts/bench-megatron.sh makes it) resharded as
// `fpgather reshard` does, per case: `--dp 4` (every group re-bucketed), `--tp 1 --pp 1 --dp 2` (the
// model-parallel rewrite) and `--dp 2 --to fully_reshardable`, with the same figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::bench {

struct ReshardBenchOptions {
  std::string dir = "/tmp";        // where the checkpoints go (removed afterwards)
  std::vector<std::string> models = {"small", "base"};
  std::vector<std::string> megatron;  // Megatron cases: dp, tp, full (none by default)
  uint64_t megatron_layers = 12;      // layers of the synthetic Megatron checkpoint
  uint64_t megatron_hidden = 1024;    // its hidden size (FFN 4x; 16 heads, 8 query groups, vocab 32768)
  uint32_t from_dp = 2, to_dp = 4;
  uint64_t plain_bytes = 1ull << 30;  // size of the plain-file baseline
  size_t threads = 0;                 // --threads: split over the training ranks, as `fpgather train` does
};

struct ReshardBenchRow {
  std::string model;  // a preset, or megatron-CASE
  uint64_t bytes_read = 0, bytes_written = 0;  // as the reshard reports them
  double train_s = 0, reshard_s = 0;           // wall time of the training (or the synthetic save) and of the reshard
  double gbps = 0;                             // bytes_written / reshard_s
  double ratio = 0;                            // gbps / min(plain read, plain write)
  // gbps / the serial bound 1 / (1/read + 1/write): what a disk whose reads and writes share one
  // bandwidth allows for reading every byte once and writing it once.
  double serial_ratio = 0;
  double duplex_ratio = 0;                     // gbps / the duplex rate (plain read || write+fsync)
  double same_size_duplex_gbps = 0;            // the duplex rate of bytes_written, measured after it
  double same_size_duplex_ratio = 0;           // gbps / same_size_duplex_gbps: the target
  uint64_t peak_rss = 0;                       // bytes, of this process while resharding
};

struct ReshardBenchResult {
  double plain_write_gbps = 0, plain_read_gbps = 0;
  double duplex_gbps = 0;  // bytes each way per second while reading one file and writing another
  std::vector<ReshardBenchRow> rows;
};

ReshardBenchResult run_reshard_bench(const ReshardBenchOptions& o);

}  // namespace fpg::bench
