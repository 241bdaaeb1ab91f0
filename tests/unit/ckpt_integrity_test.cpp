// Integrity that binds meaning: the index checksum (tables and documents) checked on every open,
// chunk checksums bound to their key and offset, format 1.0 still read (and said to lack both), and
// require_valid refusing what validation rejects.
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "catch.h"
#include "ckpt/checksum.h"
#include "ckpt_test_util.h"
#include "core/error.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"
#include "tools/ckpt_fixture.h"

using namespace fpg;

namespace {

testing::FixtureOptions small_chunks() {
  testing::FixtureOptions o;
  o.dp = 8;
  o.state_layout = ckpt::StateLayout::bucket;
  o.write.compression = ckpt::parse_compression("zstd:1");
  o.write.chunk_bytes = 128;
  return o;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Replaces the only occurrence of `was` in the file by `now` (same length): an edit that does not
// reseal the index.
void patch(const std::string& path, const std::string& was, const std::string& now) {
  REQUIRE(was.size() == now.size());
  std::string bytes = slurp(path);
  const size_t at = bytes.find(was);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(was, at + 1) == std::string::npos);
  bytes.replace(at, was.size(), now);
  spit(path, bytes);
}

// Rewrites the index after `edit` (write_index reseals it: only the chunk bindings can tell).
template <class F>
void reseal(const std::string& dir, F edit) {
  const std::string path = dir + "/" + fpckpt::kIndexFile;
  ckpt::Index ix = fpckpt::read_index(path);
  edit(ix);
  unlink(path.c_str());
  fpckpt::write_index(path, ix);
}

std::vector<ckpt::Problem> data_problems(const std::string& dir) {
  fpckpt::ValidateOptions vo;
  vo.data = true;
  return fpckpt::validate_checkpoint(dir, vo).problems;
}

}  // namespace

TEST_CASE("ckpt integrity: chunk seeds bind key and offset", "[ckpt][integrity]") {
  const char bytes[] = "0123456789abcdef";
  const uint64_t a = ckpt::chunk_seed("optimizer/w/exp_avg", 0);
  CHECK(a != ckpt::chunk_seed("optimizer/w/exp_avg_sq", 0));
  CHECK(a != ckpt::chunk_seed("optimizer/w/exp_avg", 16));
  CHECK(ckpt::checksum(bytes, 16, a) != ckpt::checksum(bytes, 16, ckpt::chunk_seed("optimizer/w/exp_avg", 16)));
  CHECK(ckpt::checksum(bytes, 16, 0) == ckpt::checksum(bytes, 16));
  // The documented definition: XXH3-64 of the name followed by the offset's 8 little-endian bytes.
  std::string s = "k";
  const uint64_t off = 0x0102030405060708ull;
  s.append(reinterpret_cast<const char*>(&off), 8);
  CHECK(ckpt::chunk_seed("k", off) == ckpt::checksum(s.data(), s.size()));
  ckpt::StreamChecksum h;
  h.update("01234", 5);
  h.update("56789abcdef", 11);
  CHECK(h.digest() == ckpt::checksum(bytes, 16));
}

TEST_CASE("ckpt integrity: an edited document or table is refused on open, reported by validate", "[ckpt][integrity]") {
  test::CkptTempDir t("fpg-integrity");
  const std::string dir = t.path + "/c";
  testing::write_fixture(dir, small_chunks());
  const std::string index = dir + "/" + fpckpt::kIndexFile;
  REQUIRE(fpckpt::read_index(index).index_checksum == ckpt::IndexChecksum::verified);
  patch(index, "\"cursor\": 1792", "\"cursor\": 1793");

  const ckpt::Index ix = fpckpt::read_index(index);
  CHECK(ix.index_checksum == ckpt::IndexChecksum::mismatch);
  CHECK(ix.documents.get(ckpt::doc::data) == std::string("{\"cursor\": 1793}"));
  try {
    fpckpt::CheckpointReader r(dir);
    FAIL("opened an altered index");
  } catch (const fpckpt::IndexChecksumError& e) {
    CHECK(e.code() == ExitCode::io);
    CHECK(std::string(e.what()).find("does not match its checksum") != std::string::npos);
  }
  const fpckpt::CheckpointReader shown(dir, fpckpt::ChunkReads::direct, fpckpt::IndexCheck::report);
  CHECK(shown.index().index_checksum == ckpt::IndexChecksum::mismatch);
  const auto rep = fpckpt::validate_checkpoint(dir, {});
  REQUIRE(rep.problems.size() == 1);
  CHECK(rep.problems[0].kind == ckpt::ProblemKind::index_checksum);
  CHECK(rep.index_checksum == ckpt::IndexChecksum::mismatch);
  try {
    fpckpt::require_valid(shown, "resume from it");
    FAIL("an altered index passed require_valid");
  } catch (const fpckpt::InvalidCheckpoint& e) {
    CHECK(e.code() == ExitCode::check_failed);
    CHECK(std::string(e.what()).find("refusing to resume from it") != std::string::npos);
    CHECK(std::string(e.what()).find("index_checksum") != std::string::npos);
  }

  // A table edited in place: a chunk's length, one byte of /chunks.
  const std::string dir2 = t.path + "/d";
  testing::write_fixture(dir2, small_chunks());
  {
    ckpt::Index before = fpckpt::read_index(dir2 + "/" + fpckpt::kIndexFile);
    // The unique key name "norm"'s bytes in /names: rename it "nor_" without resealing.
    REQUIRE(before.find_key("weight/norm") >= 0);
    patch(dir2 + "/" + fpckpt::kIndexFile, "weight/norm", "weight/nor_");
  }
  CHECK(fpckpt::read_index(dir2 + "/" + fpckpt::kIndexFile).index_checksum == ckpt::IndexChecksum::mismatch);
  CHECK_THROWS_AS(fpckpt::CheckpointReader(dir2), fpckpt::IndexChecksumError);

  // Removing the attribute is no way round it: format 2.0 requires one.
  const std::string dir3 = t.path + "/e";
  testing::write_fixture(dir3, small_chunks());
  patch(dir3 + "/" + fpckpt::kIndexFile, "index_checksum", "index_checksuX");
  const ckpt::Index ix3 = fpckpt::read_index(dir3 + "/" + fpckpt::kIndexFile);
  CHECK(ix3.index_checksum == ckpt::IndexChecksum::mismatch);
  CHECK(ix3.index_checksum_detail.find("no index_checksum attribute") != std::string::npos);
}

TEST_CASE("ckpt integrity: swapped key names and moved chunks fail validate --data, naming the key",
          "[ckpt][integrity]") {
  test::CkptTempDir t("fpg-integrity");
  const std::string exp_avg = ckpt::bucket_state_key(0, 0, "exp_avg"), exp_avg_sq = ckpt::bucket_state_key(0, 0, "exp_avg_sq");
  const std::string dir = t.path + "/swapped";
  testing::write_fixture(dir, small_chunks());
  reseal(dir, [&](ckpt::Index& ix) { std::swap(ix.keys[ix.find_key(exp_avg)].name, ix.keys[ix.find_key(exp_avg_sq)].name); });
  CHECK(fpckpt::validate_checkpoint(dir, {}).problems.empty());  // the index alone is consistent
  const auto p = data_problems(dir);
  REQUIRE(!p.empty());
  size_t named = 0;
  for (const auto& x : p) {
    CHECK(x.kind == ckpt::ProblemKind::checksum);
    named += x.key == exp_avg || x.key == exp_avg_sq;
  }
  CHECK(named == p.size());
  // Reading the swapped state fails instead of handing out the other moment.
  const fpckpt::CheckpointReader r(dir);
  std::vector<float> out(228);
  CHECK_THROWS_AS(r.read(static_cast<uint32_t>(r.find_key(exp_avg)), 0, 32, out.data()), FormatError);

  // Two runs of one key trading places, with their chunk records (the checksums travel with the
  // bytes they describe): only the offset binding notices.
  const std::string moved = t.path + "/moved";
  {
    fpckpt::WriteOptions wo;
    wo.chunk_bytes = 64;
    fpckpt::CheckpointWriter w(moved, wo);
    std::vector<float> v(64);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    for (uint32_t rank = 0; rank < 2; ++rank) {
      const uint32_t k = w.rank(rank).declare({"x", DType::F32, {64}, ckpt::KeyKind::other});
      w.rank(rank).write(k, 32 * rank, v.data() + 32 * rank, 32);
    }
    w.commit();
  }
  REQUIRE(data_problems(moved).empty());
  reseal(moved, [](ckpt::Index& ix) {
    for (auto& run : ix.runs) run.lo = 32 - run.lo;
    for (auto& c : ix.chunks) c.offset = c.offset < 32 ? c.offset + 32 : c.offset - 32;
  });
  CHECK(fpckpt::validate_checkpoint(moved, {}).problems.empty());
  const auto q = data_problems(moved);
  REQUIRE(q.size() == 4);  // two chunks of 16 in each run
  for (const auto& x : q) {
    CHECK(x.kind == ckpt::ProblemKind::checksum);
    CHECK(x.key == "x");
    CHECK(x.message.find("for this key and offset") != std::string::npos);
  }
}

TEST_CASE("ckpt integrity: format 1.0 still reads, and says what it lacks", "[ckpt][integrity]") {
  const std::string golden = std::string(FPG_TESTDATA_DIR) + "/ckpt/golden-v1.0";
  const fpckpt::CheckpointReader r(golden);
  CHECK(r.index().version.major == 1);
  CHECK(r.index().index_checksum == ckpt::IndexChecksum::absent);
  CHECK(r.index().checksum_seed(r.index().chunks.at(0)) == 0);
  fpckpt::ValidateOptions vo;
  vo.data = true;
  const auto rep = fpckpt::validate_checkpoint(golden, vo);
  CHECK(rep.problems.empty());
  CHECK(rep.chunks_read == rep.chunks);
  CHECK(rep.index_checksum == ckpt::IndexChecksum::absent);
  CHECK(!rep.chunk_checksums_bound);
  CHECK(fpckpt::integrity_note(rep.version).find("no index checksum") != std::string::npos);
  CHECK(fpckpt::integrity_note(ckpt::kFormatVersion).empty());
  CHECK_NOTHROW(fpckpt::require_valid(r, "use it"));
}

TEST_CASE("ckpt integrity: require_valid refuses what validation rejects, listing the problems", "[ckpt][integrity]") {
  const std::string broken = std::string(FPG_TESTDATA_DIR) + "/ckpt/broken/";
  for (const char* name : {"gap", "overlap", "chunk-as-padding", "padding-over-data", "duplicated-chunk",
                           "padding-only-rank-missing", "mixed-dtype", "missing-file", "truncated-file",
                           "edited-document"}) {
    INFO(name);
    try {
      fpckpt::open_valid(broken + name, "resume from it");
      FAIL("accepted");
    } catch (const fpckpt::InvalidCheckpoint& e) {
      CHECK(e.code() == ExitCode::check_failed);
      CHECK(std::string(e.what()).find("not a valid checkpoint") != std::string::npos);
    }
    CHECK_NOTHROW(fpckpt::open_valid(broken + name, "salvage it", false));
  }
  // What only the data shows is left to the reads (their checksums), not refused up front.
  CHECK_NOTHROW(fpckpt::open_valid(broken + "swapped-keys", "use it"));
}
