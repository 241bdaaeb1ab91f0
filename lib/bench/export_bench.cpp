#include "bench/export_bench.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "convert/checkpoint_params.h"
#include "convert/param_export.h"
#include "core/error.h"
#include "formats/fpckpt/bench.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/reader.h"

namespace fpg::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

uint64_t peak_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

}  // namespace

double ExportBenchResult::ratio() const { return export_gbps() / std::min(read_gbps(), write_gbps()); }

double ExportBenchResult::ratio_to_serial() const {
  return (bytes_read / (read_gbps() * 1e9) + bytes / (write_gbps() * 1e9)) / export_s;
}

ExportBenchResult run_export_bench(const ExportBenchOptions& o) {
  ExportBenchResult r;
  const std::string base = o.dir + "/fpgather-bench-export-" + std::to_string(getpid());
  if (mkdir(base.c_str(), 0755) != 0) throw FormatError(base + ": cannot create: " + std::strerror(errno));
  struct Cleanup {
    std::string p;
    ~Cleanup() { fpckpt::remove_tree(p); }
  } cleanup{base};

  // The export first (its size is what the baseline writes), from a cold page cache.
  std::string dir;
  {
    const fpckpt::CheckpointReader reader(o.checkpoint);
    dir = reader.dir();
    fpckpt::evict_path(dir);
  }
  r.peak_rss_before = peak_rss();
  double t0 = now();
  const convert::ExportSummary s =
      o.dcp ? convert::export_params_dcp(convert::open_params(o.checkpoint, "export it")->params(), base + "/export",
                                         o.export_options)
            : convert::export_checkpoint(o.checkpoint, base + "/export", o.export_options);
  r.export_s = now() - t0;
  r.peak_rss_after = peak_rss();
  r.bytes = s.bytes_written;
  r.bytes_read = s.bytes_read;
  fpckpt::remove_tree(base + "/export");

  // Baseline: as many bytes, one file, 64 MiB writes, fsync; then read back cold (as bench io).
  const fpckpt::PlainIo plain = fpckpt::measure_plain_io(base, r.bytes, true);
  r.write_s = plain.write_s;
  r.read_s = plain.read_s;
  r.duplex_s = plain.duplex_s;
  return r;
}

}  // namespace fpg::bench
