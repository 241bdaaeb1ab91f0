#include "cmd/bench/export_bench.h"

#include <algorithm>

#include "cmd/bench/page_cache.h"
#include "cmd/bench/peak_rss.h"
#include "cmd/bench/plain_io.h"
#include "cmd/bench/scratch_dir.h"
#include "cmd/bench/timing.h"
#include "app/convert/checkpoint_params.h"
#include "app/convert/param_export.h"
#include "core/fs.h"
#include "formats/fpckpt/reader.h"

namespace fpg::bench {

double ExportBenchResult::ratio() const { return export_gbps() / std::min(read_gbps(), write_gbps()); }

double ExportBenchResult::ratio_to_serial() const {
  return (bytes_read / (read_gbps() * 1e9) + bytes / (write_gbps() * 1e9)) / export_s;
}

ExportBenchResult run_export_bench(const ExportBenchOptions& o) {
  ExportBenchResult r;
  const ScratchDir scratch(o.dir, "export");
  const std::string& base = scratch.path();

  // The export first (its size is what the baseline writes), from a cold page cache.
  std::string dir;
  {
    const fpckpt::CheckpointReader reader(o.checkpoint);
    dir = reader.dir();
    evict_path(dir);
  }
  r.peak_rss_before = read_rss().peak;
  const double t0 = wall_seconds();
  const app::convert::ExportSummary s =
      o.dcp ? app::convert::export_params_dcp(app::convert::open_params(o.checkpoint, "export it")->params(), base + "/export",
                                         o.export_options)
            : app::convert::export_checkpoint(o.checkpoint, base + "/export", o.export_options);
  r.export_s = wall_seconds() - t0;
  r.peak_rss_after = read_rss().peak;
  r.bytes = s.bytes_written;
  r.bytes_read = s.bytes_read;
  fs::remove_tree(base + "/export");

  // Baseline: as many bytes, one file, 64 MiB writes, fsync; then read back cold (as bench io).
  const PlainIo plain = measure_plain_io(base, r.bytes, true);
  r.write_s = plain.write_s;
  r.read_s = plain.read_s;
  r.duplex_s = plain.duplex_s;
  return r;
}

}  // namespace fpg::bench
