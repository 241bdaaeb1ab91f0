// `fpgather bench comm`: all-gather and reduce-scatter bus bandwidth of the nccl communicator for the
// collectives a `train` step issues (one per bucket of the bucketed layout of each model at the
// given DP: reduce-scatter of the fp32 gradient bucket, all-gather of the bf16 param shard), on dp
// local GPUs (or one rank per process under mpirun). scripts/bench_torch_comm.py times the same
// sizes with torch.distributed over NCCL; the ratio of the two is the figure (BENCHMARKS.md).
//
// Timing: per iteration a barrier (host-blocking), then CUDA events on rank 0's compute stream
// around the collective and its wait(); 5 warm-up iterations, the median of `iters`.
// Bus bandwidth as nccl-tests defines it: algbw = (dp · shard bytes) / time, busbw = algbw·(dp−1)/dp.
// Needs a build with NCCL; a UsageError otherwise and with fewer GPUs than dp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::bench {

struct CommBenchOptions {
  std::vector<std::string> models = {"base", "1b"};  // presets or JSON specs of the built-in network
  uint32_t dp = 2;
  int iters = 20;
};

struct CommBenchRow {
  std::string model;
  std::string op;            // "all_gather" or "reduce_scatter"
  std::string dtype;         // "bf16" (gather) or "f32" (reduce-scatter)
  uint64_t shard_bytes = 0;  // per rank
  uint64_t total_bytes = 0;  // dp · shard_bytes
  double median_ms = 0;
  double algbw_gbps = 0, busbw_gbps = 0;
};

// The (op, dtype, shard bytes) the step of `model` at `dp` issues, one per bucket, in layout order.
std::vector<CommBenchRow> comm_bench_sizes(const std::string& model, uint32_t dp);

// Measures every size of every model; rows as comm_bench_sizes gives them, timings filled in. Only
// the process hosting rank 0 gets rows (others an empty vector).
std::vector<CommBenchRow> run_comm_bench(const CommBenchOptions& o);

}  // namespace fpg::bench
