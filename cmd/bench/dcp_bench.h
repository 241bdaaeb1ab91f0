// `fpgather bench dcp CKPT`: what fpgather spends on a PyTorch DCP / Megatron torch_dist checkpoint,
// phase by phase, in one process (BENCHMARKS.md, "DCP / Megatron checkpoints"):
//
//   open      reading and decoding .metadata (dcp::Reader), what torch's FileSystemReader.read_metadata
//             (pickle.load) does;
//   validate  dcp::validate without data: every chunk's arity, bounds, overlaps and coverage, and every
//             storage entry inside its file — the contract torch's _validate_global_plan checks;
//   export    `fpgather convert CKPT OUT.safetensors --dtype fp32` as the command runs it (open,
//             validate, then app::convert::export_params of every tensor as stored), each repetition from a
//             cold page cache (the checkpoint's files evicted) unless asked otherwise, its rate the
//             checkpoint bytes read per second.
//
// Each phase is repeated (medians) and reports its own peak RSS (peak_rss.h). torch's figures for the
// first two come from scripts/bench_dcp_torch.py on the same file; scripts/bench-dcp.sh runs both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::bench {

struct DcpBenchOptions {
  std::string checkpoint;
  uint32_t reps = 5;             // open and validate
  uint32_t export_reps = 1;      // 0: no export
  std::string export_dir = "/tmp";  // where the export is written (removed after each repetition)
  bool cold = true;              // evict the checkpoint's files from the page cache before each export
};

struct PhaseTiming {
  std::vector<double> seconds;  // each repetition, in run order
  double median_s = 0, best_s = 0;
  std::vector<double> cpu_seconds;  // the process's CPU time (all threads) of each repetition
  double median_cpu_s = 0;
  uint64_t rss_before = 0;  // bytes resident when the phase started
  uint64_t peak_rss = 0;    // bytes: the process's peak during the phase
  uint64_t peak_over_start() const { return peak_rss > rss_before ? peak_rss - rss_before : 0; }
};

struct DcpBenchResult {
  uint64_t metadata_bytes = 0;  // .metadata's size
  uint64_t keys = 0, tensors = 0, chunks = 0, storage_entries = 0, files = 0;
  bool per_phase_peaks = true;  // false: the kernel refused to reset the peak; peaks are the process's

  PhaseTiming open;
  uint64_t metadata_resident = 0;  // bytes one open Reader holds (RSS with it minus RSS without)

  PhaseTiming validate;
  uint64_t problems = 0;

  PhaseTiming export_phase;  // empty with export_reps 0
  uint64_t export_tensors = 0, export_bytes_read = 0, export_bytes_written = 0;
  double export_read_gbps() const {
    return export_phase.median_s > 0 ? export_bytes_read / export_phase.median_s / 1e9 : 0;
  }
};

// fpg::UsageError for zero reps; the checkpoint's own errors (FormatError, a failed validation's
// exit 1) propagate.
DcpBenchResult run_dcp_bench(const DcpBenchOptions& o);

}  // namespace fpg::bench
