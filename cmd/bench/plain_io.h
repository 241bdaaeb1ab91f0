// The disk baseline of `bench io`, `bench reshard` and `bench export` (BENCHMARKS.md): optimizer-like
// floats written to one file in 64 MiB writes + fsync, evicted from the page cache, read back cold;
// with `duplex`, then that file read cold again while as many bytes are written + fsynced to a
// second file, at once (what the disk does when reading and writing together, as a copy must). The
// files are removed. Seconds of each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::bench {

struct PlainIo {
  uint64_t bytes = 0;
  double write_s = 0, read_s = 0;
  double duplex_s = 0;  // both the read and the write+fsync done (0: not measured)
  double write_gbps() const { return write_s > 0 ? bytes / write_s / 1e9 : 0; }
  double read_gbps() const { return read_s > 0 ? bytes / read_s / 1e9 : 0; }
  // Bytes per second each way while reading and writing at once.
  double duplex_gbps() const { return duplex_s > 0 ? bytes / duplex_s / 1e9 : 0; }
};

// `bytes` (rounded down to whole floats) of fresh optimizer-like values, in `dir`.
PlainIo measure_plain_io(const std::string& dir, uint64_t bytes, bool duplex = false);

// The same with the caller's values (bench io writes the state it saves).
PlainIo measure_plain_io(const std::string& dir, const std::vector<float>& state, bool duplex = false);

// Fills `v` with optimizer-like values: N(0, 0.02)-ish floats from a cheap generator (Irwin-Hall of
// 4 uniforms), the same for every run, made on the global thread pool.
void fill_optimizer_like(std::vector<float>& v);

}  // namespace fpg::bench
