#include "cmd/bench/io_bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "ckpt/coverage.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fpckpt/chunk_pipeline.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"

namespace fpg::fpckpt {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Drops a file's pages from the page cache so reads come from the disk (no root needed).
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void evict_checkpoint(const std::string& dir, const ckpt::Index& ix) {
  for (const auto& f : ix.files) evict(dir + "/" + f.name);
  evict(dir + "/" + kIndexFile);
}

// /proc/self/status field in kB (VmRSS, VmHWM), or -1.
long status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, field.size() + 1, field + ":") == 0) return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
  return -1;
}

// The extra peak memory of what runs while it lives: resets the kernel's high-water mark to the
// current RSS (clear_refs 5, Linux >= 4.0), then reports VmHWM - that RSS. -1 where unsupported.
class ExtraPeak {
 public:
  ExtraPeak() {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";
    reset.flush();
    ok_ = static_cast<bool>(reset);
    start_kb_ = status_kb("VmRSS");
  }
  double mb() const {
    const long hwm = status_kb("VmHWM");
    if (!ok_ || start_kb_ < 0 || hwm < 0) return -1;
    return std::max<long>(0, hwm - start_kb_) * 1024.0 / 1e6;
  }

 private:
  bool ok_ = false;
  long start_kb_ = -1;
};

// Optimizer-like values: N(0, 0.02)-ish floats from a cheap generator (Irwin-Hall of 4 uniforms).
void fill_state(std::vector<float>& v) {
  ThreadPool& pool = ThreadPool::global();
  const size_t parts = pool.size() * 4;
  pool.parallel_for(parts, [&](size_t p) {
    uint64_t s = 0x9E3779B97F4A7C15ull * (p + 1);
    const size_t lo = v.size() * p / parts, hi = v.size() * (p + 1) / parts;
    for (size_t i = lo; i < hi; ++i) {
      float u = 0;
      for (int k = 0; k < 4; ++k) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        u += static_cast<float>(s >> 40) * (1.f / 16777216.f);
      }
      v[i] = (u - 2.f) * 0.035f;
    }
  });
}

// `bytes` of `state` to `path` in 64 MiB writes, then fsync.
void write_plain(const std::string& path, const std::vector<float>& state) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw FormatError(path + ": cannot create");
  const auto* p = reinterpret_cast<const char*>(state.data());
  const uint64_t bytes = state.size() * 4;
  for (uint64_t off = 0; off < bytes;) {
    const ssize_t n = ::write(fd, p + off, std::min<uint64_t>(64ull << 20, bytes - off));
    if (n <= 0) {
      ::close(fd);
      throw FormatError(path + ": write failed");
    }
    off += static_cast<uint64_t>(n);
  }
  fsync(fd);
  ::close(fd);
}

void read_plain(const std::string& path) {
  std::vector<char> rbuf(64ull << 20);
  const int fd = ::open(path.c_str(), O_RDONLY);
  while (::read(fd, rbuf.data(), rbuf.size()) > 0) {
  }
  ::close(fd);
}

PlainIo plain_io(const std::string& dir, const std::vector<float>& state, bool duplex = false) {
  PlainIo out;
  out.bytes = state.size() * 4;
  const std::string plain = dir + "/plain.bin", second = dir + "/plain-duplex.bin";
  double t0 = now();
  write_plain(plain, state);
  out.write_s = now() - t0;
  evict(plain);
  t0 = now();
  read_plain(plain);
  out.read_s = now() - t0;
  if (duplex) {
    evict(plain);
    t0 = now();
    std::thread reader([&] { read_plain(plain); });
    try {
      write_plain(second, state);
    } catch (...) {
      reader.join();
      unlink(plain.c_str());
      unlink(second.c_str());
      throw;
    }
    reader.join();
    out.duplex_s = now() - t0;
    unlink(second.c_str());
  }
  unlink(plain.c_str());
  return out;
}

}  // namespace

PlainIo measure_plain_io(const std::string& dir, uint64_t bytes, bool duplex) {
  std::vector<float> state(bytes / 4);
  fill_state(state);
  return plain_io(dir, state, duplex);
}

void evict_path(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) return evict(path);
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") evict_path(path + "/" + n);
    }
    closedir(d);
  }
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

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
  fill_state(state);
  const uint64_t bytes = state.size() * 4;
  const std::string base = o.dir + "/fpgather-bench-io-" + std::to_string(getpid());
  if (mkdir(base.c_str(), 0755) != 0) throw FormatError(base + ": cannot create: " + std::strerror(errno));
  struct Cleanup {
    std::string p;
    ~Cleanup() { remove_tree(p); }
  } cleanup{base};

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
    const PlainIo plain = plain_io(base, state);
    plain_w.seconds.push_back(plain.write_s);
    plain_w.peak_mb.push_back(-1);
    plain_r.seconds.push_back(plain.read_s);
    plain_r.peak_mb.push_back(-1);

    for (size_t ci = 0; ci < o.compressions.size(); ++ci) {
      const std::string& comp = o.compressions[ci];
      WriteOptions wo;
      wo.compression = ckpt::parse_compression(comp);
      wo.chunk_bytes = o.chunk_bytes;
      const std::string dir = base + "/ckpt-" + comp;
      std::unique_ptr<ExtraPeak> peak = std::make_unique<ExtraPeak>();
      const PipelineTimes pt0 = pipeline_times();
      double t0 = now();
      ckpt::Index ix;
      {
        CheckpointWriter w(dir, wo);
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
      sv.seconds.push_back(now() - t0);
      sv.peak_mb.push_back(peak->mb());
      uint64_t stored = 0;
      for (const auto& c : ix.chunks) stored += c.stored_bytes;
      sv.compression = static_cast<double>(bytes) / stored;
      const PipelineTimes pt = pipeline_times();
      sv.copy_s.push_back(pt.copy_s - pt0.copy_s);
      sv.wait_s.push_back(pt.wait_s - pt0.wait_s);
      sv.encode_s.push_back(pt.encode_s - pt0.encode_s);
      sv.write_s.push_back(pt.write_s - pt0.write_s);
      evict_checkpoint(dir, ix);
      ix = {};
      peak = std::make_unique<ExtraPeak>();
      t0 = now();
      {
        CheckpointReader rd(dir);
        for (uint64_t k = 0; k < nkeys; ++k) {
          const long key = rd.find_key("state/" + std::to_string(k));
          const uint64_t n = rd.index().keys[key].numel();
          rd.read(static_cast<uint32_t>(key), 0, n, back.data());
          if (std::memcmp(back.data(), state.data() + k * key_elems, n * 4) != 0)
            throw InternalError("bench io: loaded state differs from the saved one");
        }
      }
      loads[ci].seconds.push_back(now() - t0);
      loads[ci].peak_mb.push_back(peak->mb());
      remove_tree(dir);
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

ValidateBenchResult run_validate_bench(const ValidateBenchOptions& o) {
  ValidateBenchResult res;
  const std::string base = o.dir + "/fpgather-bench-validate-" + std::to_string(getpid());
  if (mkdir(base.c_str(), 0755) != 0) throw FormatError(base + ": cannot create: " + std::strerror(errno));
  struct Cleanup {
    std::string p;
    ~Cleanup() { remove_tree(p); }
  } cleanup{base};

  // Bucket-like keys: each rank holds a contiguous share of every key, cut into 1024-element chunks,
  // with a 64-element padding gap declared in the middle of each key.
  ckpt::Index ix;
  ix.producer = "fpgather bench";
  const uint64_t per_key = std::max<uint64_t>(1, o.chunks / o.keys);
  const uint32_t ce = 1024;
  for (uint32_t r = 0; r < o.ranks; ++r) ix.files.push_back({"rank-" + std::to_string(r) + ".h5", r, 1u << 20});
  for (uint32_t k = 0; k < o.keys; ++k) {
    const uint64_t data = per_key * ce;
    const uint64_t gap_at = (per_key / 2) * ce;
    ix.keys.push_back({"optimizer/buffer0/bucket" + std::to_string(k) + "/exp_avg", DType::F32, {data + 64},
                       ckpt::KeyKind::optimizer_state});
    ix.padding.push_back({k, gap_at, gap_at + 64});
    for (uint32_t r = 0; r < o.ranks; ++r) {
      const uint64_t c0 = per_key * r / o.ranks, c1 = per_key * (r + 1) / o.ranks;
      if (c1 == c0) continue;
      // Split a rank's share at the gap so that runs never straddle it.
      std::vector<std::pair<uint64_t, uint64_t>> pieces;
      const uint64_t mid = per_key / 2;
      if (c0 < mid && c1 > mid) pieces = {{c0, mid}, {mid, c1}};
      else pieces = {{c0, c1}};
      for (const auto& [a, b] : pieces) {
        const uint64_t lo = a * ce + (a >= mid ? 64 : 0);
        const auto run = static_cast<uint32_t>(ix.runs.size());
        ix.runs.push_back({r, run, k, ce, lo, (b - a) * ce, DType::F32, ckpt::kFilterZstd});
        for (uint64_t c = a; c < b; ++c) {
          ckpt::Chunk ch;
          ch.run = run;
          ch.offset = lo + (c - a) * ce;
          ch.length = ce;
          ch.stored_bytes = 3000;
          ch.flags = ckpt::kFilterZstd;
          ch.checksum_stored = c * 0x9E3779B97F4A7C15ull;
          ch.checksum_logical = ~ch.checksum_stored;
          ix.chunks.push_back(ch);
        }
      }
    }
  }
  const std::string path = base + "/" + kIndexFile;
  double t0 = now();
  write_index(path, ix);
  res.write_s = now() - t0;
  for (const auto& f : ix.files) {  // sparse files of the recorded sizes, for the file checks
    const int fd = ::open((base + "/" + f.name).c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) {
      if (ftruncate(fd, static_cast<off_t>(f.size)) != 0) {
      }
      ::close(fd);
    }
  }
  struct stat st {};
  stat(path.c_str(), &st);
  res.index_bytes = static_cast<uint64_t>(st.st_size);
  t0 = now();
  const ckpt::Index back = read_index(path);
  res.read_s = now() - t0;
  t0 = now();
  const auto problems = ckpt::check_index(back);
  res.check_s = now() - t0;
  t0 = now();
  const auto fp = ckpt::check_files(back, base);
  res.files_s = now() - t0;
  res.problems = problems.size() + fp.size();
  res.chunks = back.chunks.size();
  res.keys = back.keys.size();
  res.runs = back.runs.size();
  res.padding = back.padding.size();
  return res;
}

}  // namespace fpg::fpckpt
