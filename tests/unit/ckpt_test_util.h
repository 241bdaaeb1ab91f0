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
#include "core/task_queue.h"
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

// A file size limit standing in for a full disk: writes past `bytes` fail with EFBIG (SIGXFSZ is
// ignored, not fatal). lift() restores the limit and the handler; it must run before a writer that
// failed closes its file (an H5Fclose that fails leaves the file open in HDF5, which then crashes
// closing it again at exit), so the tests call it inside the writer's scope.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    if (getrlimit(RLIMIT_FSIZE, &old_) != 0) return;
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old_;
    small.rlim_cur = bytes;
    set_ = setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() { lift(); }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool set() const { return set_; }
  void lift() {
    if (!set_) return;
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, handler_);
    set_ = false;
  }

 private:
  rlimit old_{};
  void (*handler_)(int) = SIG_DFL;
  bool set_ = false;
};

// Saves `state` as key "k" of rank 0, uncompressed (raw chunks of 4000 bytes, written from the
// caller's bytes when `borrowed`), in writes of 10000 elements, while `limit` holds; lifts it inside
// the writer's scope. Returns the save's FormatError message ("" if it committed).
inline std::string save_under_limit(const std::string& dir, const std::vector<float>& state, TaskQueue& tasks,
                                    bool borrowed, FileSizeLimit& limit) {
  std::string message;
  fpckpt::WriteOptions wo;
  wo.compression = ckpt::parse_compression("none");
  wo.chunk_bytes = 4000;
  wo.tasks = &tasks;
  fpckpt::CheckpointWriter w(dir, wo);
  try {
    auto& rw = w.rank(0);
    const uint32_t k = rw.declare({"k", DType::F32, {state.size()}, ckpt::KeyKind::optimizer_state});
    for (uint64_t at = 0; at < state.size(); at += 10000) {
      if (borrowed) rw.write_borrowed(k, at, state.data() + at, 10000);
      else rw.write(k, at, state.data() + at, 10000);
    }
    w.commit();
  } catch (const FormatError& e) {
    message = e.what();
  }
  limit.lift();  // before the abandoned writer closes its file
  return message;
}

}  // namespace fpg::test
