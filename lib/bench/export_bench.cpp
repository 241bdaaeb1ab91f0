#include "bench/export_bench.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"
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

// Drops a file's pages from the page cache (no root needed) so the next read comes from the disk.
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
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
    for (const auto& f : reader.index().files) evict(dir + "/" + f.name);
    evict(dir + "/index.h5");
  }
  r.peak_rss_before = peak_rss();
  double t0 = now();
  const convert::ExportSummary s = convert::export_checkpoint(o.checkpoint, base + "/export", o.export_options);
  r.export_s = now() - t0;
  r.peak_rss_after = peak_rss();
  r.bytes = s.bytes_written;
  r.bytes_read = s.bytes_read;
  fpckpt::remove_tree(base + "/export");

  // Baseline: as many bytes, one file, 64 MiB writes, fsync; then read back cold.
  const std::string plain = base + "/plain.bin";
  std::vector<char> buf(64ull << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 2654435761u >> 24);
  t0 = now();
  {
    const int fd = ::open(plain.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw FormatError(plain + ": cannot create");
    for (uint64_t off = 0; off < r.bytes;) {
      const ssize_t n = ::write(fd, buf.data(), std::min<uint64_t>(buf.size(), r.bytes - off));
      if (n <= 0) throw FormatError(plain + ": write failed");
      off += static_cast<uint64_t>(n);
    }
    fsync(fd);
    ::close(fd);
  }
  r.write_s = now() - t0;
  evict(plain);
  t0 = now();
  {
    const int fd = ::open(plain.c_str(), O_RDONLY);
    while (::read(fd, buf.data(), buf.size()) > 0) {
    }
    ::close(fd);
  }
  r.read_s = now() - t0;
  return r;
}

}  // namespace fpg::bench
