#include "cmd/bench/dcp_bench.h"

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "cmd/bench/page_cache.h"
#include "cmd/bench/peak_rss.h"
#include "cmd/bench/timing.h"
#include "app/convert/checkpoint_params.h"
#include "app/convert/param_export.h"
#include "core/error.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/validate.h"

namespace fpg::bench {
namespace {

// Runs `rep` `reps` times (`before` untimed ahead of each) and fills the phase's figures.
PhaseTiming measure(uint32_t reps, const std::function<void()>& before, const std::function<void()>& rep,
                    bool* peak_reset) {
  PhaseTiming p;
  *peak_reset = reset_peak_rss() && *peak_reset;
  p.rss_before = read_rss().current;
  for (uint32_t i = 0; i < reps; ++i) {
    if (before) before();
    const double t0 = wall_seconds(), c0 = cpu_seconds();
    rep();
    p.seconds.push_back(wall_seconds() - t0);
    p.cpu_seconds.push_back(cpu_seconds() - c0);
  }
  p.peak_rss = read_rss().peak;
  const Timing wall = summarize(p.seconds);
  p.best_s = wall.best;
  p.median_s = wall.median;
  p.median_cpu_s = median(p.cpu_seconds);
  return p;
}

}  // namespace

DcpBenchResult run_dcp_bench(const DcpBenchOptions& o) {
  if (o.reps == 0) throw UsageError("--reps must be positive");
  if (!dcp::is_dcp_directory(o.checkpoint))
    throw FormatError(o.checkpoint + ": not a PyTorch DCP checkpoint (no regular file .metadata)");
  DcpBenchResult r;

  // Open: each repetition decodes .metadata into a fresh Reader; the previous one is dropped
  // untimed, and the last one stays open for what follows.
  std::optional<dcp::Reader> reader;
  r.open = measure(
      o.reps, [&] { reader.reset(); }, [&] { reader.emplace(o.checkpoint); }, &r.per_phase_peaks);
  reset_peak_rss();
  const uint64_t with = read_rss().current;
  r.metadata_resident = with > r.open.rss_before ? with - r.open.rss_before : 0;
  const dcp::Metadata& md = reader->metadata();
  r.keys = md.entries.size();
  for (const dcp::Entry& e : md.entries) r.tensors += e.is_tensor ? 1 : 0;
  r.chunks = md.chunk_count();
  r.storage_entries = md.storage.size();
  std::set<std::string> files;
  for (const dcp::StorageEntry& s : md.storage) files.insert(s.relative_path);
  r.files = files.size();
  for (const std::string& name : reader->metadata_files()) r.metadata_bytes += reader->files().open(name)->size();

  // Validate, index only, over the open reader (as torch validates the metadata it has loaded).
  r.validate = measure(
      o.reps, nullptr, [&] { r.problems = dcp::validate(*reader).problems.size(); }, &r.per_phase_peaks);
  reader.reset();

  if (o.export_reps == 0) return r;
  const std::string out = o.export_dir + "/fpgather-bench-dcp-" + std::to_string(getpid()) + ".safetensors";
  app::convert::ExportOptions eo;
  eo.weights = app::convert::ExportWeights::fp32;
  eo.states = false;
  eo.max_shard_bytes = UINT64_MAX;  // one file
  std::vector<std::string> written;
  auto remove_written = [&] {
    for (const std::string& f : written) std::remove(f.c_str());
    written.clear();
  };
  try {
    r.export_phase = measure(
        o.export_reps,
        [&] {
          remove_written();
          if (o.cold) evict_path(o.checkpoint);
        },
        [&] {
          const auto opened = app::convert::open_params(o.checkpoint, "export it", true);
          const app::convert::ExportSummary s = app::convert::export_params(opened->params(), out, eo);
          written = s.files;
          r.export_tensors = s.tensors;
          r.export_bytes_read = s.bytes_read;
          r.export_bytes_written = s.bytes_written;
        },
        &r.per_phase_peaks);
  } catch (...) {
    remove_written();
    throw;
  }
  remove_written();
  return r;
}

}  // namespace fpg::bench
