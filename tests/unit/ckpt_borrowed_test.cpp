// RankWriter::write_borrowed (formats/fpckpt/chunk_pipeline.h): the encoding threads read the
// caller's buffer in place instead of a copy. The stored bytes, chunk records and files must be
// those of the copying write(), edge chunks and raw-stored chunks included; fence() must hold the
// caller until no chunk reads its buffer; a failed or abandoned borrowed save leaves no checkpoint.
#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

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
  TempDir() : CkptTempDir("fpg-ckpt-borrowed") {}
};

std::vector<float> mixed_state(size_t n, size_t stretch = 1000) { return test::mixed_state(n, stretch, 7, 5); }

size_t entries(const std::string& dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
  }
  return n;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Rank 0 writes an f32 key of `state`, rank 1 a 16-bit key of its high halves (2-byte elements,
// for the shuffle), each in one write (so each file's layout is fixed: where HDF5 puts a dataset's
// header depends on what the file holds when it is created). Sizes leave edge chunks.
ckpt::Index save(const std::string& dir, const std::vector<float>& state, const std::vector<uint16_t>& halves,
                 const char* comp, bool borrowed, TaskQueue& tasks) {
  fpckpt::WriteOptions wo;
  wo.compression = ckpt::parse_compression(comp);
  wo.chunk_bytes = 4000;
  wo.tasks = &tasks;
  fpckpt::CheckpointWriter w(dir, wo);
  auto& r0 = w.rank(0);
  const uint32_t f = r0.declare({"f", DType::F32, {state.size()}, ckpt::KeyKind::optimizer_state});
  auto& r1 = w.rank(1);
  const uint32_t h = r1.declare({"h", DType::BF16, {halves.size()}, ckpt::KeyKind::weight});
  if (borrowed) {
    r0.write_borrowed(f, 0, state.data(), state.size());
    r1.write_borrowed(h, 0, halves.data(), halves.size());
  } else {
    r0.write(f, 0, state.data(), state.size());
    r1.write(h, 0, halves.data(), halves.size());
  }
  return w.commit();
}

}  // namespace

TEST_CASE("ckpt borrowed: the same files and chunk records as copied writes", "[ckpt]") {
  TempDir t;
  const std::vector<float> state = mixed_state(50001);  // odd: edge chunks on both ranks
  std::vector<uint16_t> halves(state.size() - 17);
  for (size_t i = 0; i < halves.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &state[i], 4);
    halves[i] = static_cast<uint16_t>(b >> 16);
  }
  TaskQueue four(4);
  for (const char* comp : {"none", "zstd:1", "zstd:3+shuffle"}) {
    INFO(comp);
    const std::string a = t.path + "/copy-" + comp, b = t.path + "/borrow-" + comp;
    const ckpt::Index ia = save(a, state, halves, comp, false, four);
    const ckpt::Index ib = save(b, state, halves, comp, true, four);
    REQUIRE(ia.chunks.size() == ib.chunks.size());
    size_t raw = 0, edge = 0;
    for (size_t i = 0; i < ia.chunks.size(); ++i) {
      const ckpt::Chunk &x = ia.chunks[i], &y = ib.chunks[i];
      CHECK(x.run == y.run);
      CHECK(x.offset == y.offset);
      CHECK(x.length == y.length);
      CHECK(x.stored_bytes == y.stored_bytes);
      CHECK(x.flags == y.flags);
      CHECK(x.checksum_stored == y.checksum_stored);
      CHECK(x.checksum_logical == y.checksum_logical);
      raw += (x.flags & ckpt::kFilterZstd) == 0;
      edge += x.length != ia.runs[x.run].chunk_elems;
    }
    CHECK(raw > 0);   // chunks stored raw: written from the caller's buffer when borrowed
    CHECK(edge > 0);  // zero-padded edge chunks
    REQUIRE(ia.files.size() == 2);
    for (const auto& f : ia.files) {
      INFO(f.name);
      const bool same = file_bytes(a + "/" + f.name) == file_bytes(b + "/" + f.name);
      CHECK(same);
    }
    fpckpt::ValidateOptions vo;
    vo.data = true;
    CHECK(fpckpt::validate_checkpoint(b, vo).problems.empty());
    fpckpt::CheckpointReader r(b);
    std::vector<float> back(state.size());
    r.read(static_cast<uint32_t>(r.find_key("f")), 0, state.size(), back.data());
    CHECK(std::memcmp(back.data(), state.data(), state.size() * 4) == 0);
  }
}

TEST_CASE("ckpt borrowed: fence() lets the caller reuse its buffer", "[ckpt]") {
  TempDir t;
  // Noise at a slow zstd level on one encoding thread: chunks are still queued when write_borrowed
  // returns, so a buffer overwritten without the fence would be saved as overwritten.
  const std::vector<float> state = mixed_state(300000, 300000);
  TaskQueue one(1);
  fpckpt::WriteOptions wo;
  wo.compression = ckpt::parse_compression("zstd:15");
  wo.chunk_bytes = 16384;
  wo.tasks = &one;
  const std::string dir = t.path + "/fenced";
  {
    fpckpt::CheckpointWriter w(dir, wo);
    auto& rw = w.rank(0);
    const uint32_t k = rw.declare({"k", DType::F32, {state.size()}, ckpt::KeyKind::optimizer_state});
    const size_t piece = 100000;
    std::vector<float> buf(piece);
    for (size_t at = 0; at < state.size(); at += piece) {
      std::copy(state.begin() + at, state.begin() + at + piece, buf.begin());
      rw.write_borrowed(k, at, buf.data(), piece);
      rw.fence();
      std::fill(buf.begin(), buf.end(), -1.f);
    }
    w.commit();
  }
  fpckpt::CheckpointReader r(dir);
  std::vector<float> back(state.size());
  r.read(0, 0, state.size(), back.data());
  CHECK(std::memcmp(back.data(), state.data(), state.size() * 4) == 0);
  fpckpt::ValidateOptions vo;
  vo.data = true;
  CHECK(fpckpt::validate_checkpoint(dir, vo).problems.empty());
}

TEST_CASE("ckpt borrowed: a failed or abandoned borrowed save leaves no checkpoint", "[ckpt]") {
  TempDir t;
  const std::vector<float> state = mixed_state(400000);  // 1.6 MB
  TaskQueue four(4);
  SECTION("a chunk write fails") {
    std::string message;
    {
      // A file size limit stands in for a full disk: writes past 256 KiB fail (EFBIG, not a signal).
      test::FileSizeLimit limit(256 << 10);
      REQUIRE(limit.set());
      // raw chunks: written from `state` itself
      message = test::save_state(t.path + "/full", state, four, true);
    }
    INFO(message);
    CHECK(message.find("rank-00000.h5") != std::string::npos);
    CHECK(message.find("write chunk [") != std::string::npos);
  }
  SECTION("the caller fails with chunks in flight") {
    bool threw = false;
    try {
      fpckpt::WriteOptions wo;
      wo.chunk_bytes = 4000;
      wo.tasks = &four;
      fpckpt::CheckpointWriter w(t.path + "/abandoned", wo);
      auto& rw = w.rank(0);
      const uint32_t k = rw.declare({"k", DType::F32, {state.size()}, ckpt::KeyKind::optimizer_state});
      rw.write_borrowed(k, 0, state.data(), state.size());
      throw FormatError("simulated failure of the caller");
    } catch (const FormatError&) {
      threw = true;
    }
    CHECK(threw);
  }
  // Neither a checkpoint nor its staging directory is left.
  CHECK(entries(t.path) == 0);
}
