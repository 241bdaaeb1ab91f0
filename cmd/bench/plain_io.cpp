#include "cmd/bench/plain_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "cmd/bench/page_cache.h"
#include "cmd/bench/timing.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/thread_start.h"

namespace fpg::bench {
namespace {

// `state` to `path` in 64 MiB writes, then fsync.
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

}  // namespace

void fill_optimizer_like(std::vector<float>& v) {
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

PlainIo measure_plain_io(const std::string& dir, uint64_t bytes, bool duplex) {
  std::vector<float> state(bytes / 4);
  fill_optimizer_like(state);
  return measure_plain_io(dir, state, duplex);
}

PlainIo measure_plain_io(const std::string& dir, const std::vector<float>& state, bool duplex) {
  PlainIo out;
  out.bytes = state.size() * 4;
  const std::string plain = dir + "/plain.bin", second = dir + "/plain-duplex.bin";
  double t0 = wall_seconds();
  write_plain(plain, state);
  out.write_s = wall_seconds() - t0;
  evict_path(plain);
  t0 = wall_seconds();
  read_plain(plain);
  out.read_s = wall_seconds() - t0;
  if (duplex) {
    evict_path(plain);
    t0 = wall_seconds();
    std::thread reader = start_thread([&] { read_plain(plain); }, "the duplex read");
    try {
      write_plain(second, state);
    } catch (...) {
      reader.join();
      unlink(plain.c_str());
      unlink(second.c_str());
      throw;
    }
    reader.join();
    out.duplex_s = wall_seconds() - t0;
    unlink(second.c_str());
  }
  unlink(plain.c_str());
  return out;
}

}  // namespace fpg::bench
