// Shared by the checkpoint write-path tests: a temporary directory removed with its contents, and a
// state whose chunks take both encodings.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/fpckpt/commit.h"

namespace fpg::test {

struct CkptTempDir {
  std::string path;
  explicit CkptTempDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
    path = mkdtemp(tmpl.data());
  }
  ~CkptTempDir() { fpckpt::remove_tree(path); }
  CkptTempDir(const CkptTempDir&) = delete;
  CkptTempDir& operator=(const CkptTempDir&) = delete;
};

// Alternating stretches of noise (stored raw under zstd) and smooth values i % period (compressed).
inline std::vector<float> mixed_state(size_t n, size_t stretch, uint32_t seed, int period) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if ((i / stretch) % 2 == 0) {
      const uint32_t bits = rng();
      std::memcpy(&v[i], &bits, 4);
    } else {
      v[i] = static_cast<float>(i % static_cast<size_t>(period));
    }
  }
  return v;
}

}  // namespace fpg::test
