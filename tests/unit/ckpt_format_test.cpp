// The fpgather checkpoint format end to end: write through the API, validate, read back any range,
// `latest`, retention, version refusal, abandoned saves, layout checks and model-space diff.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "catch.h"
#include "ckpt/coverage.h"
#include "ckpt/layout_check.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/diff.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"
#include "tools/ckpt_fixture.h"

using namespace fpg;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-ckpt-test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_tree(path); }
};

testing::FixtureOptions opts(uint32_t dp, ckpt::StateLayout sl, const char* comp, uint64_t chunk_bytes = 128) {
  testing::FixtureOptions o;
  o.dp = dp;
  o.state_layout = sl;
  o.write.compression = ckpt::parse_compression(comp);
  o.write.chunk_bytes = chunk_bytes;
  return o;
}

bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("ckpt format: every layout and encoding writes a valid checkpoint that reads back", "[ckpt]") {
  TempDir t;
  int n = 0;
  for (const char* comp : {"none", "zstd:1", "zstd:3+shuffle"})
    for (auto sl : {ckpt::StateLayout::bucket, ckpt::StateLayout::model})
      for (uint32_t dp : {1u, 2u, 8u}) {
        const std::string dir = t.path + "/c" + std::to_string(n++);
        testing::write_fixture(dir, opts(dp, sl, comp));
        fpckpt::ValidateOptions vo;
        vo.data = true;
        const auto rep = fpckpt::validate_checkpoint(dir, vo);
        INFO(dir << " " << comp << " dp " << dp);
        for (const auto& p : rep.problems) INFO(ckpt::to_string(p));
        CHECK(rep.problems.empty());
        CHECK(rep.layout_checked);
        fpckpt::CheckpointReader r(dir);
        // Model layout: a key per (param, state) with the param's values.
        if (sl == ckpt::StateLayout::model) {
          const long k = r.find_key(ckpt::model_state_key("blocks.0.w", "exp_avg"));
          REQUIRE(k >= 0);
          std::vector<float> v(100);
          r.read(static_cast<uint32_t>(k), 0, 100, v.data());
          for (uint64_t i = 0; i < 100; ++i) CHECK(v[i] == testing::fixture_value(0, "exp_avg", i));
          // A partial read across chunk boundaries.
          std::vector<float> part(37);
          r.read(static_cast<uint32_t>(k), 13, 50, part.data());
          for (uint64_t i = 0; i < 37; ++i) CHECK(part[i] == testing::fixture_value(0, "exp_avg", 13 + i));
        } else {
          const long k = r.find_key(ckpt::bucket_state_key(0, 0, "master"));
          REQUIRE(k >= 0);
          std::vector<float> v(228);
          r.read(static_cast<uint32_t>(k), 0, 228, v.data());
          for (uint64_t i = 0; i < 65; ++i) CHECK(v[i] == testing::fixture_value(1, "master", i));
          for (uint64_t i = 65; i < 128; ++i) CHECK(v[i] == 0.f);  // declared padding reads as zeros
          for (uint64_t i = 128; i < 228; ++i) CHECK(v[i] == testing::fixture_value(0, "master", i - 128));
        }
      }
}

TEST_CASE("ckpt format: model-space diff sees two DP layouts of one state as equal", "[ckpt]") {
  TempDir t;
  testing::write_fixture(t.path + "/a", opts(2, ckpt::StateLayout::model, "none"));
  testing::write_fixture(t.path + "/b", opts(8, ckpt::StateLayout::model, "zstd:1", 64));
  auto p = opts(4, ckpt::StateLayout::model, "zstd:1");
  p.perturb = true;
  testing::write_fixture(t.path + "/c", p);
  fpckpt::CheckpointReader a(t.path + "/a"), b(t.path + "/b"), c(t.path + "/c");
  CHECK(fpckpt::diff_checkpoints(a, b, {}).equal());
  const auto d = fpckpt::diff_checkpoints(a, c, {});
  REQUIRE(!d.equal());
  bool found = false;
  for (const auto& kd : d.diffs)
    if (kd.key == ckpt::model_state_key("blocks.0.w", "exp_avg")) {
      found = true;
      CHECK(kd.differing == 1);
      REQUIRE(kd.first.size() == 1);
      CHECK(kd.first[0].index == 42);
    }
  CHECK(found);
  fpckpt::DiffOptions loose;
  loose.atol = 1.0;
  // The perturbed bf16 weight also differs, by less than 1.
  CHECK(fpckpt::diff_checkpoints(a, c, loose).equal());
}

TEST_CASE("ckpt format: latest, retention and abandoned saves", "[ckpt]") {
  TempDir t;
  for (int s = 1; s <= 4; ++s) {
    const std::string name = "step-0000000" + std::to_string(s);
    testing::write_fixture(t.path + "/" + name, opts(2, ckpt::StateLayout::model, "zstd:1"));
    fpckpt::update_latest(t.path, name);
  }
  CHECK(fpckpt::resolve_checkpoint(t.path) == t.path + "/step-00000004");
  fpckpt::CheckpointReader r(t.path);  // a root holding latest stands for its checkpoint
  CHECK(r.dir() == t.path + "/step-00000004");
  const auto removed = fpckpt::apply_retention(t.path, 2);
  CHECK(removed.size() == 2);
  CHECK(!exists(t.path + "/step-00000001"));
  CHECK(exists(t.path + "/step-00000003"));
  CHECK(exists(t.path + "/step-00000004"));
  {
    fpckpt::CheckpointWriter w(t.path + "/abandoned");
    const float x = 1;
    auto& rw = w.rank(0);
    rw.write(rw.declare({"x", DType::F32, {1}, ckpt::KeyKind::other}), 0, &x, 1);
    CHECK(exists(w.staging()));
  }  // destroyed without commit
  CHECK(!exists(t.path + "/abandoned"));
  CHECK_THROWS_AS(fpckpt::CheckpointWriter(t.path + "/step-00000004"), UsageError);
}

TEST_CASE("ckpt format: ranks finished early (finish_rank) commit the checkpoint commit() alone makes", "[ckpt]") {
  TempDir t;
  // Three ranks, each with its own keys and a share of a common one, written one rank after another.
  auto save = [&](const std::string& dir, const char* comp, bool early) {
    fpckpt::WriteOptions o;
    o.compression = ckpt::parse_compression(comp);
    o.chunk_bytes = 256;
    fpckpt::CheckpointWriter w(dir, o);
    w.documents().set("note", "{\"early\": true}");
    for (uint32_t r = 0; r < 3; ++r) {
      auto& rw = w.rank(r);
      std::vector<float> v(1000 + 100 * r);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r * 10000 + i) * 0.5f;
      rw.write(rw.declare({"own" + std::to_string(r), DType::F32, {v.size()}, ckpt::KeyKind::weight}), 0, v.data(), v.size());
      const uint32_t shared = rw.declare({"shared", DType::F32, {300}, ckpt::KeyKind::master});
      rw.write(shared, 100 * r, v.data(), 100);
      if (early) {
        w.finish_rank(r);
        CHECK_THROWS_AS(w.rank(r), InternalError);
      }
    }
    return w.commit();
  };
  for (const char* comp : {"none", "zstd:1"}) {
    INFO(comp);
    const std::string a = t.path + "/at-commit-" + comp, b = t.path + "/early-" + comp;
    const ckpt::Index ia = save(a, comp, false), ib = save(b, comp, true);
    REQUIRE(ia.keys.size() == ib.keys.size());
    for (size_t k = 0; k < ia.keys.size(); ++k) CHECK(ia.keys[k].name == ib.keys[k].name);
    REQUIRE(ia.files.size() == 3);
    REQUIRE(ib.files.size() == 3);
    for (size_t f = 0; f < 3; ++f) {
      CHECK(ia.files[f].name == ib.files[f].name);
      // Uncompressed chunks have their place from their dataset's creation: the same file, byte for
      // byte (where compressed chunks land depends on the order the encoding threads finish in).
      if (std::string(comp) == "none")
        CHECK(fs::read_small_file(a + "/" + ia.files[f].name, 1 << 20) == fs::read_small_file(b + "/" + ib.files[f].name, 1 << 20));
    }
    REQUIRE(ia.chunks.size() == ib.chunks.size());
    for (size_t c = 0; c < ia.chunks.size(); ++c) {
      CHECK(ia.chunks[c].offset == ib.chunks[c].offset);
      CHECK(ia.chunks[c].checksum_logical == ib.chunks[c].checksum_logical);
    }
    fpckpt::ValidateOptions vo;
    vo.data = true;
    const auto rep = fpckpt::validate_checkpoint(b, vo);
    CHECK(rep.problems.empty());
    CHECK(rep.chunks_read == ib.chunks.size());
  }
  // Abandoned with ranks finishing in the background: nothing is left.
  {
    fpckpt::CheckpointWriter w(t.path + "/abandoned");
    for (uint32_t r = 0; r < 2; ++r) {
      const float x = static_cast<float>(r);
      auto& rw = w.rank(r);
      rw.write(rw.declare({"x" + std::to_string(r), DType::F32, {1}, ckpt::KeyKind::other}), 0, &x, 1);
      w.finish_rank(r);
    }
    CHECK(exists(w.staging()));
  }
  CHECK(!exists(t.path + "/abandoned"));
}

TEST_CASE("ckpt format: a newer major version is refused with a clear message", "[ckpt]") {
  TempDir t;
  const std::string dir = t.path + "/c";
  testing::write_fixture(dir, opts(2, ckpt::StateLayout::model, "none"));
  const std::string path = dir + "/index.h5";
  auto ix = fpckpt::read_index(path);
  ix.version = {ckpt::kFormatVersion.major + 1, 3};
  unlink(path.c_str());
  fpckpt::write_index(path, ix);
  try {
    fpckpt::CheckpointReader r(dir);
    FAIL("opened a newer version");
  } catch (const fpckpt::VersionError& e) {
    CHECK(std::string(e.what()).find("newer than this fpgather reads") != std::string::npos);
  }
  // A newer minor of the same major reads.
  ix.version = {ckpt::kFormatVersion.major, ckpt::kFormatVersion.minor + 5};
  unlink(path.c_str());
  fpckpt::write_index(path, ix);
  CHECK_NOTHROW(fpckpt::CheckpointReader(dir));
}

TEST_CASE("ckpt format: index bytes per chunk stay within 48", "[ckpt]") {
  TempDir t;
  const std::string dir = t.path + "/c";
  fpckpt::WriteOptions wo;
  wo.chunk_bytes = 64;  // 16 f32 per chunk
  fpckpt::CheckpointWriter w(dir, wo);
  std::vector<float> v(16 * 20000, 1.f);
  auto& rw = w.rank(0);
  for (int k = 0; k < 5; ++k)
    rw.write(rw.declare({"k" + std::to_string(k), DType::F32, {v.size()}, ckpt::KeyKind::other}), 0, v.data(), v.size());
  const auto ix = w.commit();
  struct stat st {};
  REQUIRE(stat((dir + "/index.h5").c_str(), &st) == 0);
  INFO("index bytes " << st.st_size << " for " << ix.chunks.size() << " chunks");
  CHECK(static_cast<double>(st.st_size) / ix.chunks.size() <= 48.0);
}

TEST_CASE("ckpt layout check: ownership and padding mismatches are reported", "[ckpt]") {
  TempDir t;
  const std::string dir = t.path + "/c";
  auto ix = testing::write_fixture(dir, opts(8, ckpt::StateLayout::bucket, "none"));
  const auto spec = testing::fixture_spec();
  layout::BucketedOptions lo;
  lo.dp = 8;
  const auto L = layout::build_bucketed_layout(spec, lo);
  CHECK(ckpt::check_layout(ix, L, ckpt::StateLayout::bucket, testing::fixture_states()).empty());
  // Pretend rank 1's file came from rank 2: its chunks are now owned by someone else.
  for (auto& f : ix.files)
    if (f.rank == 1) f.rank = 2;
  auto p = ckpt::check_layout(ix, L, ckpt::StateLayout::bucket, testing::fixture_states());
  REQUIRE(!p.empty());
  CHECK(p[0].kind == ckpt::ProblemKind::layout_mismatch);
  // Against another DP size the padding and ownership differ.
  lo.dp = 2;
  CHECK(!ckpt::check_layout(testing::write_fixture(t.path + "/d", opts(8, ckpt::StateLayout::model, "none")),
                            layout::build_bucketed_layout(spec, lo), ckpt::StateLayout::model, testing::fixture_states())
             .empty());
}

TEST_CASE("ckpt format: a rank number beyond the most ranks is refused before anything is sized by it", "[ckpt]") {
  TempDir t;
  fpckpt::WriteOptions o;
  o.compression = ckpt::parse_compression("none");
  fpckpt::CheckpointWriter w(t.path + "/c", o);
  CHECK_THROWS_AS(w.rank(ckpt::kMaxRanks), InternalError);
  CHECK_THROWS_AS(w.rank(UINT32_MAX), InternalError);
  CHECK_NOTHROW(w.rank(ckpt::kMaxRanks - 1));
}
