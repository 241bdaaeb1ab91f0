// `fpgather bench validate` (BENCHMARKS.md): index-only validation speed and index size on a synthetic
// index of bucket-like keys.
#pragma once

#include <cstdint>
#include <string>

namespace fpg::bench {

struct ValidateBenchOptions {
  std::string dir = "/tmp";
  uint64_t chunks = 1'000'000;
  uint32_t keys = 1000;
  uint32_t ranks = 8;
};

struct ValidateBenchResult {
  uint64_t chunks = 0, keys = 0, runs = 0, padding = 0;
  uint64_t index_bytes = 0;
  double write_s = 0, read_s = 0, check_s = 0, files_s = 0;
  double total_s() const { return read_s + check_s + files_s; }
  double chunks_per_s() const { return total_s() > 0 ? chunks / total_s() : 0; }
  double bytes_per_chunk() const { return chunks ? static_cast<double>(index_bytes) / chunks : 0; }
  uint64_t problems = 0;
};

ValidateBenchResult run_validate_bench(const ValidateBenchOptions& o);

}  // namespace fpg::bench
