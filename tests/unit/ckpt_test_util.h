// Shared by the checkpoint write-path tests: a temporary directory removed with its contents, and a
// state whose chunks take both encodings.
#pragma once

#include <stdlib.h>
#include <sys/resource.h>

#include <csignal>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/task_queue.h"
#include "formats/fpckpt/commit.h"

namespace fpg::test {

struct CkptTempDir {
  std::string path;
  explicit CkptTempDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
    path = mkdtemp(tmpl.data());
  }
  ~CkptTempDir() { fs::remove_tree(path); }
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

// A file size limit standing in for a full disk: writes past `bytes` fail with EFBIG (SIGXFSZ is
// ignored, not fatal). The limit and the handler are restored when it goes out of scope.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    if (getrlimit(RLIMIT_FSIZE, &old_) != 0) return;
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old_;
    small.rlim_cur = bytes;
    set_ = setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    if (!set_) return;
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool set() const { return set_; }

 private:
  rlimit old_{};
  void (*handler_)(int) = SIG_DFL;
  bool set_ = false;
};

// Saves `state` as key "k" of rank 0, uncompressed (raw chunks of 4000 bytes, written from the
// caller's bytes when `borrowed`), in writes of 10000 elements. Returns the save's FormatError
// message ("" if it committed); the writer is gone, its files closed or abandoned, on return.
inline std::string save_state(const std::string& dir, const std::vector<float>& state, TaskQueue& tasks, bool borrowed) {
  fpckpt::WriteOptions wo;
  wo.compression = ckpt::parse_compression("none");
  wo.chunk_bytes = 4000;
  wo.tasks = &tasks;
  try {
    fpckpt::CheckpointWriter w(dir, wo);
    auto& rw = w.rank(0);
    const uint32_t k = rw.declare({"k", DType::F32, {state.size()}, ckpt::KeyKind::optimizer_state});
    for (uint64_t at = 0; at < state.size(); at += 10000) {
      if (borrowed) rw.write_borrowed(k, at, state.data() + at, 10000);
      else rw.write(k, at, state.data() + at, 10000);
    }
    w.commit();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace fpg::test
