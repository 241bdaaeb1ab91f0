// The rank writer's chunk pipeline (formats/fpckpt/chunk_pipeline.h): write() returns once the bytes
// are copied, so the caller may reuse its buffer at once; chunks are encoded by several threads yet
// written in order, so the stored chunks do not depend on the thread count; mixed compressible and
// incompressible chunks of one zstd run read back; an abandoned writer leaves nothing half-done.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "catch.h"
#include "core/task_queue.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"

using namespace fpg;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-ckpt-pipeline.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fpckpt::remove_tree(path); }
};

// Alternating stretches of noise (stored raw) and smooth values (compressed), 1000-element stretches.
std::vector<float> mixed_state(size_t n) {
  std::mt19937 rng(11);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if ((i / 1000) % 2 == 0) {
      const uint32_t bits = rng();
      std::memcpy(&v[i], &bits, 4);
    } else {
      v[i] = static_cast<float>(i % 7);
    }
  }
  return v;
}

// Saves `state` as key "k" over two ranks in writes of `piece` elements from one reused buffer.
ckpt::Index save(const std::string& dir, const std::vector<float>& state, size_t piece, TaskQueue& tasks,
                 const char* comp) {
  fpckpt::WriteOptions wo;
  wo.compression = ckpt::parse_compression(comp);
  wo.chunk_bytes = 4000;
  wo.tasks = &tasks;
  fpckpt::CheckpointWriter w(dir, wo);
  std::vector<float> buf(piece);
  const uint64_t half = state.size() / 2;
  for (uint32_t r = 0; r < 2; ++r) {
    auto& rw = w.rank(r);
    const uint32_t k = rw.declare({"k", DType::F32, {state.size()}, ckpt::KeyKind::optimizer_state});
    for (uint64_t at = r * half; at < (r + 1) * half; at += piece) {
      const uint64_t n = std::min<uint64_t>(piece, (r + 1) * half - at);
      std::copy(state.begin() + at, state.begin() + at + n, buf.begin());
      rw.write(k, at, buf.data(), n);
      std::fill(buf.begin(), buf.end(), -1.f);  // the writer must have copied what it needs
    }
  }
  return w.commit();
}

}  // namespace

TEST_CASE("ckpt pipeline: chunks do not depend on the thread count; buffers are reusable at once", "[ckpt]") {
  TempDir t;
  const std::vector<float> state = mixed_state(40000);
  TaskQueue one(1), four(4);
  for (const char* comp : {"none", "zstd:1", "zstd:1+shuffle"}) {
    INFO(comp);
    const std::string a = t.path + "/a-" + comp, b = t.path + "/b-" + comp;
    const ckpt::Index ia = save(a, state, 3333, one, comp);
    const ckpt::Index ib = save(b, state, 7777, four, comp);
    fpckpt::ValidateOptions vo;
    vo.data = true;
    CHECK(fpckpt::validate_checkpoint(a, vo).problems.empty());
    CHECK(fpckpt::validate_checkpoint(b, vo).problems.empty());
    // Same logical bytes whatever the write sizes and threads.
    for (const std::string& dir : {a, b}) {
      fpckpt::CheckpointReader r(dir);
      std::vector<float> back(state.size());
      r.read(0, 0, state.size(), back.data());
      CHECK(std::memcmp(back.data(), state.data(), state.size() * 4) == 0);
      CHECK(r.chunks_read() == r.index().chunks.size());
    }
    // A zstd run mixes compressed and raw chunks, each flagged as stored.
    if (std::string(comp) != "none") {
      size_t raw = 0, zstd = 0;
      for (const auto& c : ia.chunks) (c.flags & ckpt::kFilterZstd ? zstd : raw)++;
      CHECK(raw > 0);
      CHECK(zstd > 0);
    }
  }
  // Same writes, 1 thread vs 4: identical chunk records (sizes, flags, checksums), in order.
  const ckpt::Index x = save(t.path + "/x", state, 3333, one, "zstd:1");
  const ckpt::Index y = save(t.path + "/y", state, 3333, four, "zstd:1");
  REQUIRE(x.chunks.size() == y.chunks.size());
  for (size_t i = 0; i < x.chunks.size(); ++i) {
    CHECK(x.chunks[i].offset == y.chunks[i].offset);
    CHECK(x.chunks[i].stored_bytes == y.chunks[i].stored_bytes);
    CHECK(x.chunks[i].flags == y.chunks[i].flags);
    CHECK(x.chunks[i].checksum_stored == y.chunks[i].checksum_stored);
  }
}

TEST_CASE("ckpt pipeline: an abandoned save waits for its chunks and leaves no checkpoint", "[ckpt]") {
  TempDir t;
  const std::vector<float> state = mixed_state(200000);
  TaskQueue four(4);
  const std::string dir = t.path + "/abandoned";
  {
    fpckpt::WriteOptions wo;
    wo.chunk_bytes = 4000;
    wo.tasks = &four;
    fpckpt::CheckpointWriter w(dir, wo);
    auto& rw = w.rank(0);
    const uint32_t k = rw.declare({"k", DType::F32, {state.size()}, ckpt::KeyKind::optimizer_state});
    rw.write(k, 0, state.data(), state.size());  // chunks still in flight when the writer goes
  }
  // Neither the checkpoint nor its staging directory is left.
  size_t left = 0;
  if (DIR* d = opendir(t.path.c_str())) {
    while (dirent* e = readdir(d)) left += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
  }
  CHECK(left == 0);
}
