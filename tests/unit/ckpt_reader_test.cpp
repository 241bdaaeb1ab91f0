// CheckpointReader's direct reads (pread at the address HDF5 reports, outside the HDF5 mutex) against
// the H5Dread_chunk path: the same bytes for every chunk and encoding, and clear errors when the
// index and the file disagree on a chunk's size or the file ends inside a chunk.
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "tools/ckpt_fixture.h"

using namespace fpg;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-reader-test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_tree(path); }
};

std::string write_checkpoint(const std::string& dir, const char* comp, ckpt::StateLayout sl) {
  testing::FixtureOptions o;
  o.dp = 2;
  o.state_layout = sl;
  o.write.compression = ckpt::parse_compression(comp);
  o.write.chunk_bytes = 128;
  testing::write_fixture(dir, o);
  return dir;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("ckpt reader: direct reads return the bytes H5Dread_chunk returns", "[ckpt][reader]") {
  TempDir t;
  int n = 0;
  for (const char* comp : {"none", "zstd:1", "zstd:3+shuffle"})
    for (auto sl : {ckpt::StateLayout::bucket, ckpt::StateLayout::model}) {
      const std::string dir = write_checkpoint(t.path + "/c" + std::to_string(n++), comp, sl);
      const fpckpt::CheckpointReader direct(dir), ref(dir, fpckpt::ChunkReads::hdf5);
      // HDF5 here and on the GPU host is >= 1.10.5, where the direct path exists.
      CHECK(direct.chunk_reads() == fpckpt::ChunkReads::direct);
      CHECK(ref.chunk_reads() == fpckpt::ChunkReads::hdf5);
      ckpt::CodecScratch s1, s2;
      std::vector<uint8_t> st1, lg1, st2, lg2;
      const auto& ix = direct.index();
      REQUIRE(!ix.chunks.empty());
      for (uint32_t c = 0; c < ix.chunks.size(); ++c) {
        INFO(dir << " chunk " << c);
        CHECK(direct.verify_chunk(c, s1, st1, lg1) == "");
        CHECK(ref.verify_chunk(c, s2, st2, lg2) == "");
        CHECK(lg1 == lg2);
        CHECK(lg1.size() == ix.chunks[c].length * (dtype_bits(ix.runs[ix.chunks[c].run].dtype) / 8));
      }
      CHECK(direct.chunks_read() == ix.chunks.size());
      CHECK(direct.stored_bytes_read() == ref.stored_bytes_read());
      // Whole keys through read(), both paths, in parallel.
      for (uint32_t k = 0; k < ix.keys.size(); ++k) {
        const size_t bytes = ix.keys[k].numel() * (dtype_bits(ix.keys[k].dtype) / 8);
        std::vector<uint8_t> a(bytes), b(bytes);
        direct.read(k, 0, ix.keys[k].numel(), a.data());
        ref.read(k, 0, ix.keys[k].numel(), b.data());
        CHECK(a == b);
      }
    }
}

TEST_CASE("ckpt reader: a stored size that disagrees with the index is a FormatError naming the chunk", "[ckpt][reader]") {
  TempDir t;
  const std::string dir = write_checkpoint(t.path + "/c", "none", ckpt::StateLayout::model);
  const std::string index_path = dir + "/" + fpckpt::kIndexFile;
  ckpt::Index ix = fpckpt::read_index(index_path);
  const long key = ix.find_key(ckpt::model_state_key("blocks.0.w", "exp_avg"));
  REQUIRE(key >= 0);
  uint32_t victim = UINT32_MAX;
  for (uint32_t c = 0; c < ix.chunks.size(); ++c)
    if (ix.runs[ix.chunks[c].run].key == static_cast<uint32_t>(key) && ix.chunks[c].offset > 0 && victim == UINT32_MAX)
      victim = c;
  REQUIRE(victim != UINT32_MAX);
  const ckpt::Chunk ch = ix.chunks[victim];
  const std::string file = ix.files[ix.runs[ch.run].file].name;
  const std::string range = "[" + std::to_string(ch.offset) + ", " + std::to_string(ch.hi()) + ")";
  const uint32_t real = ch.stored_bytes;
  ix.chunks[victim].stored_bytes = real - 4;
  unlink(index_path.c_str());
  fpckpt::write_index(index_path, ix);

  for (auto mode : {fpckpt::ChunkReads::direct, fpckpt::ChunkReads::hdf5}) {
    const fpckpt::CheckpointReader r(dir, mode);
    std::vector<float> v(100);
    const std::string what = what_of([&] { r.read(static_cast<uint32_t>(key), 0, 100, v.data()); });
    INFO(what);
    CHECK(contains(what, file));
    CHECK(contains(what, "exp_avg"));
    CHECK(contains(what, range));
    CHECK(contains(what, "stored chunk has " + std::to_string(real) + " bytes, the index records " +
                             std::to_string(real - 4)));
  }
}

TEST_CASE("ckpt reader: a data file that ends inside a chunk is a FormatError, not short data", "[ckpt][reader]") {
  TempDir t;
  const std::string dir = write_checkpoint(t.path + "/c", "none", ckpt::StateLayout::model);
  const fpckpt::CheckpointReader r(dir);
  const long key = r.find_key(ckpt::model_state_key("blocks.0.w", "master"));
  REQUIRE(key >= 0);
  const auto& chunks = r.chunks_of(static_cast<uint32_t>(key));
  REQUIRE(chunks.size() >= 2);
  ckpt::CodecScratch s;
  std::vector<uint8_t> stored, logical;
  // The first chunk locates its run and opens the file; then the file loses its bytes.
  REQUIRE(r.verify_chunk(chunks[0], s, stored, logical) == "");
  const auto& ix = r.index();
  const std::string file = ix.files[ix.runs[ix.chunks[chunks[1]].run].file].name;
  REQUIRE(truncate((dir + "/" + file).c_str(), 0) == 0);
  const std::string err = r.verify_chunk(chunks[1], s, stored, logical);
  INFO(err);
  CHECK(contains(err, "the file ends at byte"));
  CHECK(contains(err, "inside the chunk stored at bytes ["));
  std::vector<float> v(100);
  const std::string what = what_of([&] { r.read(static_cast<uint32_t>(key), 0, 100, v.data()); });
  CHECK(contains(what, file));
  CHECK(contains(what, "master"));
  CHECK(contains(what, "the file ends at byte"));
}
