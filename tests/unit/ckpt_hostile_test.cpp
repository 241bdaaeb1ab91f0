// Readers of a hostile checkpoint: index references out of range, runs of another element type and
// objects outside the checkpoint give FormatErrors naming what is wrong, through every read path
// (direct and H5Dread_chunk), never a crash or a read past a buffer; files that are not regular
// are refused before they are opened.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "catch.h"
#include "ckpt/coverage.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/summary.h"
#include "formats/safetensors/mapped_file.h"
#include "tools/ckpt_fixture.h"

using namespace fpg;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-hostile-test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_tree(path); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The dp-2 fixture with its index rewritten after `edit`.
template <class F>
std::string edited_fixture(const std::string& dir, F edit) {
  testing::FixtureOptions o;
  o.dp = 2;
  o.write.chunk_bytes = 128;
  testing::write_fixture(dir, o);
  const std::string path = dir + "/" + fpckpt::kIndexFile;
  ckpt::Index ix = fpckpt::read_index(path);
  edit(ix);
  unlink(path.c_str());
  fpckpt::write_index(path, ix);
  return dir;
}

// Reads every key whole: "" or the first FormatError.
std::string read_all(const fpckpt::CheckpointReader& r) {
  std::string first;
  for (uint32_t k = 0; k < r.index().keys.size(); ++k) {
    const ckpt::Key& key = r.index().keys[k];
    std::vector<uint8_t> out(key.numel() * (dtype_bits(key.dtype) / 8));
    const std::string e = error_of([&] { r.read(k, 0, key.numel(), out.data()); });
    if (first.empty()) first = e;
  }
  return first;
}

const std::string kBroken = std::string(FPG_TESTDATA_DIR) + "/ckpt/broken/";

}  // namespace

TEST_CASE("ckpt hostile: references out of range are errors on every read path", "[ckpt][hostile]") {
  TempDir t;
  const std::string master = ckpt::bucket_state_key(0, 0, "master");
  const std::string dir = edited_fixture(t.path + "/c", [&](ckpt::Index& ix) {
    const long k = ix.find_key(master);
    for (auto& run : ix.runs)
      if (run.key == static_cast<uint32_t>(k)) run.file = UINT32_MAX;  // every run of the master
    ix.runs.push_back(ix.runs.back());
    ix.runs.back().key = UINT32_MAX;
    ix.chunks.push_back(ix.chunks.back());
    ix.chunks.back().run = static_cast<uint32_t>(ix.runs.size() - 1);
    ix.chunks.push_back(ix.chunks.back());
    ix.chunks.back().run = UINT32_MAX;
    ix.padding.push_back({UINT32_MAX, 0, 1});
  });
  for (auto reads : {fpckpt::ChunkReads::direct, fpckpt::ChunkReads::hdf5}) {
    const fpckpt::CheckpointReader r(dir, reads);
    const ckpt::Index& ix = r.index();
    const uint32_t k = static_cast<uint32_t>(ix.find_key(master));
    std::vector<float> out(ix.keys[k].numel());
    const std::string e = error_of([&] { r.read(k, 0, ix.keys[k].numel(), out.data()); });
    INFO(e);
    CHECK(contains(e, dir + ": key '" + master + "' ["));  // no file to name: the checkpoint
    CHECK(contains(e, "run names no file"));
    // Every chunk checks itself, the dangling ones included.
    ckpt::CodecScratch scratch;
    std::vector<uint8_t> stored, logical;
    size_t bad = 0;
    for (uint32_t c = 0; c < ix.chunks.size(); ++c) bad += !r.verify_chunk(c, scratch, stored, logical).empty();
    CHECK(bad == r.chunks_of(k).size() + 2);
    CHECK(r.chunk_file(static_cast<uint32_t>(ix.chunks.size() - 1)) == dir);
  }
  const ckpt::Index ix = fpckpt::read_index(dir + "/" + fpckpt::kIndexFile);
  CHECK(ix.run_file_name(0) == "");
  CHECK(ix.run_file_name(UINT32_MAX) == "");
  CHECK(fpckpt::summarize(ix).keys.size() == ix.keys.size());
  CHECK(!ckpt::check_index(ix).empty());
}

TEST_CASE("ckpt hostile: a run of another element type than its key is refused, not read past", "[ckpt][hostile]") {
  TempDir t;
  const std::string key = ckpt::bucket_state_key(0, 0, "exp_avg");
  const std::string dir = edited_fixture(t.path + "/c", [&](ckpt::Index& ix) {
    const long k = ix.find_key(key);
    for (auto& run : ix.runs)
      if (run.key == static_cast<uint32_t>(k)) run.dtype = DType::BF16;  // half the bytes of the F32 key
  });
  for (auto reads : {fpckpt::ChunkReads::direct, fpckpt::ChunkReads::hdf5}) {
    const fpckpt::CheckpointReader r(dir, reads);
    const std::string e = read_all(r);
    INFO(e);
    CHECK(contains(e, "key '" + key + "' ["));
    CHECK(contains(e, "stored as BF16, the key is F32"));
  }
}

TEST_CASE("ckpt hostile: objects outside the checkpoint are refused, naming them", "[ckpt][hostile]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"external-link-document", "/documents/model is an HDF5 external link"},
      {"external-storage-names", "/names keeps its data in external files"},
      {"virtual-names", "/names is an HDF5 virtual dataset"},
      {"document-array", "/documents/model is not a single string"},
      {"huge-table", "table /chunks declares 1099511627776 records of 40 bytes but stores 0 bytes"},
  };
  for (const auto& c : cases) {
    const auto& name = c.first;  // a structured binding cannot be captured in C++17
    const auto& what = c.second;
    const std::string e = error_of([&] { fpckpt::CheckpointReader r(kBroken + name); });
    INFO(e);
    CHECK(contains(e, kBroken + name + "/index.h5: " + what));
  }
  for (auto reads : {fpckpt::ChunkReads::direct, fpckpt::ChunkReads::hdf5}) {
    const fpckpt::CheckpointReader r(kBroken + "rank-file-external-link", reads);
    const std::string e = read_all(r);
    INFO(e);
    CHECK(contains(e, "rank-00000.h5: key '"));
    CHECK(contains(e, "dataset /0 is an HDF5 external link"));
  }
}

TEST_CASE("ckpt hostile: only regular files are opened", "[ckpt][hostile]") {
  TempDir t;
  const std::string file = t.path + "/file", fifo = t.path + "/fifo", link = t.path + "/link";
  std::FILE* f = std::fopen(file.c_str(), "w");
  REQUIRE(f);
  std::fputs("bytes", f);
  std::fclose(f);
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(symlink(file.c_str(), link.c_str()) == 0);
  const int fd = fs::open_regular_file(file, false);
  CHECK(fd >= 0);
  close(fd);
  CHECK(contains(error_of([&] { fs::open_regular_file(fifo, true); }), fifo + ": not a regular file (a FIFO)"));
  CHECK(contains(error_of([&] { fs::open_regular_file(t.path, true); }), "not a regular file (a directory)"));
  CHECK(contains(error_of([&] { fs::open_regular_file(link, false); }), "not a regular file (a symbolic link)"));
  const int followed = fs::open_regular_file(link, true);
  CHECK(followed >= 0);
  close(followed);
  CHECK(contains(error_of([&] { safetensors::MappedFile m(fifo); }), "not a regular file (a FIFO)"));
  // A checkpoint whose index is a FIFO, or whose `latest` is one.
  mkdir((t.path + "/c").c_str(), 0755);
  REQUIRE(mkfifo((t.path + "/c/index.h5").c_str(), 0600) == 0);
  CHECK(contains(error_of([&] { fpckpt::CheckpointReader r(t.path + "/c"); }), "index.h5: not a regular file (a FIFO)"));
  mkdir((t.path + "/root").c_str(), 0755);
  REQUIRE(mkfifo((t.path + "/root/latest").c_str(), 0600) == 0);
  CHECK(contains(error_of([&] { fpckpt::resolve_checkpoint(t.path + "/root"); }), "latest: not a regular file"));
}
