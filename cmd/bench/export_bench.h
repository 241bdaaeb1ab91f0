// `fpgather bench export CKPT`: checkpoint -> safetensors (or DCP) export throughput against the disk it
// runs on, measured in the same run and the same directory: a plain write + fsync of as many bytes
// as the export writes, a cold plain read of them, then the export with the checkpoint's files
// evicted from the page cache (its reads come from the disk, its writes are fsynced by the commit).
// The figure of merit is export GB/s / min(plain read, plain write) GB/s (target >= 0.8), beside the
// ratio to reading then writing at the plain rates, the ratio to the "duplex" rate (the plain file
// read cold while another is written + fsynced at once: what the disk gives a copy), and the peak
// RSS, which is bounded by the export's slabs, not by the checkpoint's size.
#pragma once

#include <cstdint>
#include <string>

#include "app/convert/checkpoint_export.h"

namespace fpg::bench {

struct ExportBenchOptions {
  std::string checkpoint;
  std::string dir = "/tmp";  // where the plain file and the export go (removed afterwards)
  app::convert::ExportOptions export_options;
  bool dcp = false;  // export a PyTorch DCP checkpoint (`convert --to dcp`) instead of safetensors
};

struct ExportBenchResult {
  uint64_t bytes = 0;  // tensor bytes the export wrote (the plain file has as many)
  uint64_t bytes_read = 0;
  double write_s = 0, read_s = 0, export_s = 0;
  double duplex_s = 0;  // plain read of `bytes` || plain write+fsync of `bytes`, both done
  double write_gbps() const { return bytes / write_s / 1e9; }
  double read_gbps() const { return bytes / read_s / 1e9; }
  double export_gbps() const { return bytes / export_s / 1e9; }
  double duplex_gbps() const { return duplex_s > 0 ? bytes / duplex_s / 1e9 : 0; }
  double ratio_to_duplex() const { return duplex_s > 0 ? export_gbps() / duplex_gbps() : 0; }
  double ratio() const;  // export / min(read, write)
  // The seconds one disk needs to read bytes_read and then write bytes at the plain rates, over the
  // export's seconds: > 1 when the export overlaps its reads and writes, 1 when it only serializes
  // them. (With reads and writes sharing one disk, export / min(read, write) cannot exceed
  // 1 / (1 + min/max) without such overlap: 0.5 when read and write rates are equal.)
  double ratio_to_serial() const;
  uint64_t peak_rss_before = 0, peak_rss_after = 0;  // bytes (peak_rss.h), before and after the export
};

ExportBenchResult run_export_bench(const ExportBenchOptions& o);

}  // namespace fpg::bench
