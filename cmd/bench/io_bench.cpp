#include "cmd/bench/io_bench.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "cmd/bench/page_cache.h"
#include "cmd/bench/peak_rss.h"
#include "cmd/bench/plain_io.h"
#include "cmd/bench/scratch_dir.h"
#include "cmd/bench/timing.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/chunk_pipeline.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/reader.h"

namespace fpg::bench {
namespace {

// The extra peak memory of what runs while it lives: the peak is reset to the current RSS at
// construction (peak_rss.h), and mb() is the peak since over that RSS. -1 where the kernel refuses.
class ExtraPeak {
 public:
  ExtraPeak() : reset_(reset_peak_rss()), start_(read_rss().current) {}
  double mb() const {
    if (!reset_ || start_ == 0) return -1;
    const uint64_t peak = read_rss().peak;
    return peak > start_ ? (peak - start_) / 1e6 : 0;
  }

 private:
  bool reset_ = false;
  uint64_t start_ = 0;  // bytes
};

// One row's reps, folded into an IoBenchRow by finish_row.
struct RowSamples {
  explicit RowSamples(std::string w, bool is_save = false) : what(std::move(w)), save(is_save) {}
  std::string what;
  std::vector<double> seconds, peak_mb, copy_s, wait_s, encode_s, write_s;
  double compression = 1;
  bool save = false;
};

IoBenchRow finish_row(const RowSamples& r, uint64_t bytes, double baseline_s) {
  IoBenchRow row;
  row.what = r.what;
  row.rep_seconds = r.seconds;
  row.seconds = median(r.seconds);
  row.gbps = bytes / row.seconds / 1e9;
  row.ratio = baseline_s / row.seconds;  // throughput over the baseline's, from the medians
  row.compression = r.compression;
  for (double p : r.peak_mb) row.extra_peak_mb = p < 0 ? -1 : std::max(row.extra_peak_mb, p);
  if (r.save) {
    row.copy_s = median(r.copy_s);
    row.wait_s = median(r.wait_s);
    row.encode_s = median(r.encode_s);
    row.write_s = median(r.write_s);
  }
  return row;
}

}  // namespace

std::vector<IoBenchRow> run_io_bench(const IoBenchOptions& o) {
  if (o.reps == 0) throw UsageError("bench io: --reps must be positive");
  std::vector<float> state(o.bytes / 4);
  fill_optimizer_like(state);
  const uint64_t bytes = state.size() * 4;
  const ScratchDir scratch(o.dir, "io");
  const std::string& base = scratch.path();

  RowSamples plain_w("plain write+fsync"), plain_r("plain read (cold)");
  std::vector<RowSamples> saves, loads;
  for (const auto& comp : o.compressions) {
    saves.emplace_back("save " + comp, true);
    loads.emplace_back("load " + comp);
  }
  // Keys of 64 MiB, split evenly over the ranks (each rank its contiguous share of every key).
  const uint64_t key_elems = std::min<uint64_t>(16ull << 20, state.size());
  const uint64_t nkeys = (state.size() + key_elems - 1) / key_elems;
  std::vector<float> back(key_elems);  // the loads' destination, allocated before measuring

  // Interleaved: each rep measures the disk, then saves and loads every encoding, so that a disk
  // whose speed drifts during the run moves every row alike.
  for (uint32_t rep = 0; rep < o.reps; ++rep) {
    // Baseline: one large file, 64 MiB writes, fsync; then read back cold.
    const PlainIo plain = measure_plain_io(base, state);
    plain_w.seconds.push_back(plain.write_s);
    plain_w.peak_mb.push_back(-1);
    plain_r.seconds.push_back(plain.read_s);
    plain_r.peak_mb.push_back(-1);

    for (size_t ci = 0; ci < o.compressions.size(); ++ci) {
      const std::string& comp = o.compressions[ci];
      fpckpt::WriteOptions wo;
      wo.compression = ckpt::parse_compression(comp);
      wo.chunk_bytes = o.chunk_bytes;
      const std::string dir = base + "/ckpt-" + comp;
      std::unique_ptr<ExtraPeak> peak = std::make_unique<ExtraPeak>();
      const fpckpt::PipelineTimes pt0 = fpckpt::pipeline_times();
      double t0 = wall_seconds();
      ckpt::Index ix;
      {
        fpckpt::CheckpointWriter w(dir, wo);
        for (uint32_t r = 0; r < o.ranks; ++r) {
          auto& rw = w.rank(r);
          for (uint64_t k = 0; k < nkeys; ++k) {
            const uint64_t klo = k * key_elems, n = std::min(key_elems, state.size() - klo);
            const uint32_t key = rw.declare({"state/" + std::to_string(k), DType::F32, {n}, ckpt::KeyKind::optimizer_state});
            const uint64_t lo = n * r / o.ranks, hi = n * (r + 1) / o.ranks;
            if (o.borrowed) rw.write_borrowed(key, lo, state.data() + klo + lo, hi - lo);  // `state` outlives the save
            else rw.write(key, lo, state.data() + klo + lo, hi - lo);
          }
        }
        ix = w.commit();
      }
      RowSamples& sv = saves[ci];
      sv.seconds.push_back(wall_seconds() - t0);
      sv.peak_mb.push_back(peak->mb());
      uint64_t stored = 0;
      for (const auto& c : ix.chunks) stored += c.stored_bytes;
      sv.compression = static_cast<double>(bytes) / stored;
      const fpckpt::PipelineTimes pt = fpckpt::pipeline_times();
      sv.copy_s.push_back(pt.copy_s - pt0.copy_s);
      sv.wait_s.push_back(pt.wait_s - pt0.wait_s);
      sv.encode_s.push_back(pt.encode_s - pt0.encode_s);
      sv.write_s.push_back(pt.write_s - pt0.write_s);
      evict_path(dir);
      ix = {};
      peak = std::make_unique<ExtraPeak>();
      t0 = wall_seconds();
      {
        fpckpt::CheckpointReader rd(dir);
        for (uint64_t k = 0; k < nkeys; ++k) {
          const long key = rd.find_key("state/" + std::to_string(k));
          const uint64_t n = rd.index().keys[key].numel();
          rd.read(static_cast<uint32_t>(key), 0, n, back.data());
          if (std::memcmp(back.data(), state.data() + k * key_elems, n * 4) != 0)
            throw InternalError("bench io: loaded state differs from the saved one");
        }
      }
      loads[ci].seconds.push_back(wall_seconds() - t0);
      loads[ci].peak_mb.push_back(peak->mb());
      fs::remove_tree(dir);
    }
  }

  const double w_s = median(plain_w.seconds), r_s = median(plain_r.seconds);
  std::vector<IoBenchRow> rows = {finish_row(plain_w, bytes, w_s), finish_row(plain_r, bytes, r_s)};
  for (size_t ci = 0; ci < o.compressions.size(); ++ci) {
    rows.push_back(finish_row(saves[ci], bytes, w_s));
    rows.push_back(finish_row(loads[ci], bytes, r_s));
  }
  // zstd against uncompressed, each direction, from the medians.
  const auto none = std::find(o.compressions.begin(), o.compressions.end(), "none");
  if (none != o.compressions.end()) {
    const size_t ni = 2 + 2 * static_cast<size_t>(none - o.compressions.begin());
    for (size_t ci = 0; ci < o.compressions.size(); ++ci) {
      const size_t i = 2 + 2 * ci;
      if (i == ni) continue;
      rows[i].ratio_to_none = rows[ni].seconds / rows[i].seconds;
      rows[i + 1].ratio_to_none = rows[ni + 1].seconds / rows[i + 1].seconds;
    }
  }
  return rows;
}

}  // namespace fpg::bench
