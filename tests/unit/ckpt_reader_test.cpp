// CheckpointReader's direct reads (pread at the address HDF5 reports, outside the HDF5 mutex) against
// the H5Dread_chunk path: the same bytes for every chunk and encoding, and clear errors when the
// index and the file disagree on a chunk's size or the file ends inside a chunk. What the
// prefetches (prefetch_datasets, ReadAhead) bring into the page cache of a cold file.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/read_ahead.h"
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

namespace {

// Which pages of the file at `path` (`len` bytes) are in the page cache.
std::vector<unsigned char> resident_pages(const std::string& path, size_t len) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  void* map = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(map != MAP_FAILED);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((len + page - 1) / page);
  const int rc = mincore(map, len, v.data());
  munmap(map, len);
  REQUIRE(rc == 0);
  for (auto& b : v) b &= 1;
  return v;
}

// A one-file checkpoint of kKeys uncompressed keys of 2 MiB (one chunk each), key k holding value(k)
// throughout, out of the page cache, and where each key's data begins in its file.
struct ColdCheckpoint {
  static constexpr uint64_t kElems = 1 << 19;
  static constexpr int kKeys = 6;
  static float value(int k) { return 1.25f + static_cast<float>(k); }
  std::string dir, path;
  size_t len = 0, page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<uint64_t> data_at;
  bool cold = false;  // false where the file system keeps files in memory (tmpfs)

  explicit ColdCheckpoint(const std::string& d) : dir(d) {
    fpckpt::WriteOptions o;
    o.compression = ckpt::parse_compression("none");
    o.chunk_bytes = kElems * 4;
    fpckpt::CheckpointWriter w(dir, o);
    for (int k = 0; k < kKeys; ++k) {
      std::vector<float> data(kElems, value(k));
      auto& r = w.rank(0);
      const uint32_t id = r.declare({"key" + std::to_string(k), DType::F32, {kElems}, ckpt::KeyKind::weight});
      r.write(id, 0, data.data(), kElems);
    }
    const ckpt::Index ix = w.commit();
    REQUIRE(ix.files.size() == 1);
    REQUIRE(ix.runs.size() == kKeys);
    path = dir + "/" + ix.files[0].name;
    len = ix.files[0].size;
    // The first of each key's values in the file (each key has its own).
    const std::string bytes = fs::read_small_file(path, 64ull << 20);
    for (int k = 0; k < kKeys; ++k) {
      const std::vector<float> pattern(16, value(k));
      const size_t at = std::string_view(bytes).find(
          std::string_view(reinterpret_cast<const char*>(pattern.data()), pattern.size() * sizeof(float)));
      REQUIRE(at != std::string::npos);
      data_at.push_back(at);
    }
    const int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    const auto now = resident_pages(path, len);
    cold = true;
    for (uint64_t a : data_at) cold = cold && !now[(a - 1) / page] && !now[(a + (1 << 20)) / page];
    if (!cold) WARN("the file system keeps " << path << " in memory (tmpfs?): nothing to prefetch, test skipped");
  }
  // The page cache once `done` holds of it, or after 5 s (the reads asked for are asynchronous).
  std::vector<unsigned char> wait_for(const std::function<bool(const std::vector<unsigned char>&)>& done) const {
    std::vector<unsigned char> now;
    for (int i = 0; i < 500; ++i) {
      now = resident_pages(path, len);
      if (done(now)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return now;
  }
  bool header_in(const std::vector<unsigned char>& pages, int k) const { return pages[(data_at[k] - 1) / page]; }
  bool data_in(const std::vector<unsigned char>& pages, int k) const { return pages[(data_at[k] + (1 << 20)) / page]; }
};

}  // namespace

TEST_CASE("ckpt reader: prefetch_datasets reads the pages before each dataset's data, not the data", "[ckpt][reader]") {
  TempDir t;
  const ColdCheckpoint c(t.path + "/c");
  if (!c.cold) return;
  const fpckpt::CheckpointReader r(c.dir);
  std::vector<uint32_t> runs;
  for (uint32_t i = 0; i < r.index().runs.size(); ++i) runs.push_back(i);
  r.prefetch_datasets(runs);
  const auto now = c.wait_for([&](const std::vector<unsigned char>& p) {
    for (int k = 0; k < c.kKeys; ++k)
      if (!c.header_in(p, k)) return false;
    return true;
  });
  for (int k = 0; k < c.kKeys; ++k) {
    INFO("key " << k << ", data at byte " << c.data_at[k]);
    CHECK(c.header_in(now, k));  // its dataset's object header and chunk index
    CHECK(!c.data_in(now, k));   // its data, a MiB in: not read
  }
  size_t resident = 0;
  for (auto b : now) resident += b;
  CHECK(resident <= c.kKeys * 4 + 8);  // 12 KiB a dataset (four pages unaligned), and what opening the file read
  // Reads are unchanged.
  std::vector<float> v(c.kElems);
  r.read(3, 0, c.kElems, v.data());
  CHECK(v[0] == c.value(3));
  CHECK(v[c.kElems - 1] == c.value(3));
}

TEST_CASE("ckpt read-ahead: the range about to be read is asked for first, even with no window", "[ckpt][reader]") {
  TempDir t;
  const ColdCheckpoint c(t.path + "/c");
  if (!c.cold) return;
  const fpckpt::CheckpointReader r(c.dir);
  std::vector<fpckpt::ReadRange> ranges;
  for (uint32_t k = 0; k < 3; ++k) ranges.push_back({k, 0, c.kElems, c.kElems * 4});
  fpckpt::ReadAhead ahead(r, ranges, 0);
  ahead.next();  // range 0 is about to be read: it, and the datasets of all three, are asked for
  const auto now = c.wait_for([&](const std::vector<unsigned char>& p) {
    return c.data_in(p, 0) && c.header_in(p, 0) && c.header_in(p, 1) && c.header_in(p, 2);
  });
  CHECK(c.data_in(now, 0));
  CHECK(!c.data_in(now, 1));  // beyond a window of 0
  for (int k = 0; k < 3; ++k) CHECK(c.header_in(now, k));
  CHECK(!c.header_in(now, 4));  // a dataset no range reads
}
