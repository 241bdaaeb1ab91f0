// The rank writer's chunk pipeline (formats/fpckpt/chunk_pipeline.h): write() returns once the bytes
// are copied, so the caller may reuse its buffer at once; chunks are encoded by several threads yet
// written in order, so the stored chunks do not depend on the thread count; mixed compressible and
// incompressible chunks of one zstd run read back; ranks written at once go through the one writer
// thread each in its own order (their files are byte for byte those of a one-thread save); a failed
// write fails the save; an abandoned writer leaves nothing half-done.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "catch.h"
#include "core/error.h"
#include "core/task_queue.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"
#include "ckpt_test_util.h"

using namespace fpg;

namespace {

struct TempDir : test::CkptTempDir {
  TempDir() : CkptTempDir("fpg-ckpt-pipeline") {}
};

std::vector<float> mixed_state(size_t n, size_t stretch = 1000) { return test::mixed_state(n, stretch, 11, 7); }

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

// Saves `state` as key "k" over `ranks` ranks, each rank written by its own thread at the same time
// (all through the one writer thread), in writes of `piece` elements.
ckpt::Index save_concurrently(const std::string& dir, const std::vector<float>& state, uint32_t ranks, size_t piece,
                              uint64_t chunk_bytes, TaskQueue& tasks) {
  fpckpt::WriteOptions wo;
  wo.compression = ckpt::parse_compression("zstd:15");  // slow on noise, quick on smooth values
  wo.chunk_bytes = chunk_bytes;
  wo.tasks = &tasks;
  fpckpt::CheckpointWriter w(dir, wo);
  std::vector<fpckpt::RankWriter*> rw;
  for (uint32_t r = 0; r < ranks; ++r) rw.push_back(&w.rank(r));  // rank() itself is not thread-safe
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(ranks);
  for (uint32_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        const uint32_t k = rw[r]->declare({"k", DType::F32, {state.size()}, ckpt::KeyKind::optimizer_state});
        const uint64_t lo = state.size() * r / ranks, hi = state.size() * (r + 1) / ranks;
        for (uint64_t at = lo; at < hi; at += piece) rw[r]->write(k, at, state.data() + at, std::min<uint64_t>(piece, hi - at));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return w.commit();
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
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

TEST_CASE("ckpt pipeline: ranks saved at once are written each in its own order by the writer thread", "[ckpt]") {
  TempDir t;
  // 64 KiB chunks alternately of noise (slow to compress) and smooth values (fast), 8 a rank.
  const uint64_t chunk = 16384;
  const std::vector<float> state = mixed_state(4 * 8 * chunk, chunk);
  TaskQueue one(1), four(4);
  // One encoding thread: each rank's chunks reach the writer in order anyway (the reference). Four:
  // chunks finish encoding out of order and the four ranks' chunks interleave at the writer, yet each
  // rank file must come out byte for byte the same (chunk addresses included). One write() per rank,
  // so its dataset is created before any chunk is written (where HDF5 puts a dataset's header
  // depends on what the file holds when it is created).
  const ckpt::Index ia = save_concurrently(t.path + "/a", state, 4, 8 * chunk, chunk * 4, one);
  REQUIRE(ia.files.size() == 4);
  for (const char* b : {"b1", "b2", "b3"}) {  // a reordering need not show every time: three tries
    const ckpt::Index ib = save_concurrently(t.path + "/" + b, state, 4, 8 * chunk, chunk * 4, four);
    REQUIRE(ib.files.size() == ia.files.size());
    for (const auto& f : ia.files) {
      INFO(b << "/" << f.name);
      const std::string x = file_bytes(t.path + "/a/" + f.name), y = file_bytes(t.path + "/" + b + "/" + f.name);
      CHECK(x.size() > 8 * chunk * 2);  // 512 KiB a rank, half of it noise
      const bool same = x == y;
      CHECK(same);
    }
  }
  fpckpt::ValidateOptions vo;
  vo.data = true;
  CHECK(fpckpt::validate_checkpoint(t.path + "/b1", vo).problems.empty());
}

TEST_CASE("ckpt pipeline: a failed chunk write fails the save and leaves no checkpoint", "[ckpt]") {
  TempDir t;
  const std::vector<float> state = mixed_state(400000);  // 1.6 MB
  TaskQueue four(4);
  const std::string dir = t.path + "/full";
  std::string message;
  {
    // A file size limit stands in for a full disk: writes past 256 KiB fail (EFBIG, not a signal).
    // It holds while the failed writer abandons its file.
    test::FileSizeLimit limit(256 << 10);
    REQUIRE(limit.set());
    message = test::save_state(dir, state, four, false);
  }
  INFO(message);
  CHECK(message.find("rank-00000.h5") != std::string::npos);
  CHECK(message.find("write chunk [") != std::string::npos);
  CHECK(message.find("file size limit exceeded") != std::string::npos);
  size_t left = 0;
  if (DIR* d = opendir(t.path.c_str())) {
    while (dirent* e = readdir(d)) left += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
  }
  CHECK(left == 0);
  // HDF5 is left consistent: the same process saves and reads the state afterwards.
  REQUIRE(test::save_state(dir, state, four, false).empty());
  fpckpt::CheckpointReader r(dir);
  std::vector<float> back(state.size());
  r.read(0, 0, state.size(), back.data());
  CHECK(std::memcmp(back.data(), state.data(), state.size() * 4) == 0);
}
