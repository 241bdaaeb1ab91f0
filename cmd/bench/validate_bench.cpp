#include "cmd/bench/validate_bench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "ckpt/coverage.h"
#include "cmd/bench/scratch_dir.h"
#include "cmd/bench/timing.h"
#include "core/error.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"

namespace fpg::bench {

ValidateBenchResult run_validate_bench(const ValidateBenchOptions& o) {
  ValidateBenchResult res;
  const ScratchDir scratch(o.dir, "validate");
  const std::string& base = scratch.path();

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
  const std::string path = base + "/" + fpckpt::kIndexFile;
  double t0 = wall_seconds();
  fpckpt::write_index(path, ix);
  res.write_s = wall_seconds() - t0;
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
  t0 = wall_seconds();
  const ckpt::Index back = fpckpt::read_index(path);
  res.read_s = wall_seconds() - t0;
  t0 = wall_seconds();
  const auto problems = ckpt::check_index(back);
  res.check_s = wall_seconds() - t0;
  t0 = wall_seconds();
  const auto fp = ckpt::check_files(back, base);
  res.files_s = wall_seconds() - t0;
  res.problems = problems.size() + fp.size();
  res.chunks = back.chunks.size();
  res.keys = back.keys.size();
  res.runs = back.runs.size();
  res.padding = back.padding.size();
  return res;
}

}  // namespace fpg::bench
