// The coverage contract from the index alone: exact gap/overlap/out-of-bounds ranges, dtype and
// grid checks, file checks, and O(n log n) behaviour on a million chunks.
#include <algorithm>
#include <chrono>

#include "catch.h"
#include "ckpt/coverage.h"
#include "ckpt/problem.h"

using namespace fpg;
using namespace fpg::ckpt;

namespace {

// One F32 key of n elements, one file, one run per [lo, hi) piece with chunks of `ce` elements.
Index make_index(uint64_t n, const std::vector<std::pair<uint64_t, uint64_t>>& data,
                 const std::vector<std::pair<uint64_t, uint64_t>>& pads, uint32_t ce = 4) {
  Index ix;
  ix.keys.push_back({"k", DType::F32, {n}, KeyKind::optimizer_state});
  ix.files.push_back({"rank-00000.h5", 0, 100});
  for (const auto& [lo, hi] : data) {
    const auto r = static_cast<uint32_t>(ix.runs.size());
    ix.runs.push_back({0, r, 0, ce, lo, hi - lo, DType::F32, 0});
    for (uint64_t x = lo; x < hi; x += ce) {
      Chunk c;
      c.run = r;
      c.offset = x;
      c.length = static_cast<uint32_t>(std::min<uint64_t>(ce, hi - x));
      c.stored_bytes = ce * 4;
      ix.chunks.push_back(c);
    }
  }
  for (const auto& [lo, hi] : pads) ix.padding.push_back({0, lo, hi});
  ix.link_chunks();
  return ix;
}

}  // namespace

TEST_CASE("ckpt coverage: exact cover is valid", "[ckpt]") {
  CHECK(check_index(make_index(100, {{0, 40}, {64, 100}}, {{40, 64}})).empty());
  CHECK(check_index(make_index(0, {}, {})).empty());
}

TEST_CASE("ckpt coverage: gap, overlap, out of bounds ranges", "[ckpt]") {
  SECTION("gap in the middle and at the end") {
    auto p = check_index(make_index(100, {{0, 40}, {64, 90}}, {{44, 64}}));
    sort_problems(p);
    REQUIRE(p.size() == 2);
    CHECK(p[0].kind == ProblemKind::gap);
    CHECK(p[0].lo == 40);
    CHECK(p[0].hi == 44);
    CHECK(p[1].kind == ProblemKind::gap);
    CHECK(p[1].lo == 90);
    CHECK(p[1].hi == 100);
    CHECK(to_string(p[0]) == "gap k [40, 44) -: not covered by data or declared padding");
  }
  SECTION("padding overlapping data") {
    // One record per overlapping interval: the padding overlaps chunks [60, 64), [64, 68), [68, 72).
    auto p = check_index(make_index(100, {{0, 64}, {64, 100}}, {{60, 70}}));
    REQUIRE(p.size() == 3);
    sort_problems(p);
    for (const auto& x : p) CHECK(x.kind == ProblemKind::overlap);
    CHECK(p[0].lo == 60);
    CHECK(p[0].hi == 64);
    CHECK(p[1].lo == 64);
    CHECK(p[1].hi == 68);
    CHECK(p[2].lo == 68);
    CHECK(p[2].hi == 70);
  }
  SECTION("padding past the extent") {
    auto p = check_index(make_index(100, {{0, 96}}, {{96, 128}}));
    REQUIRE(p.size() == 1);
    CHECK(p[0].kind == ProblemKind::out_of_bounds);
    CHECK(p[0].lo == 96);
    CHECK(p[0].hi == 128);
  }
  SECTION("a key nothing covers") {
    auto p = check_index(make_index(10, {}, {}));
    REQUIRE(p.size() == 1);
    CHECK(p[0].kind == ProblemKind::gap);
    CHECK(p[0].hi == 10);
  }
}

TEST_CASE("ckpt coverage: dtype, grid and references", "[ckpt]") {
  auto ix = make_index(16, {{0, 16}}, {});
  SECTION("run dtype differs from key dtype") {
    ix.runs[0].dtype = DType::BF16;
    auto p = check_index(ix);
    REQUIRE(p.size() == 1);
    CHECK(p[0].kind == ProblemKind::dtype);
    CHECK(p[0].file == "rank-00000.h5");
  }
  SECTION("chunk off its run's grid") {
    ix.chunks[1].offset = 5;
    auto p = check_index(ix);
    bool oob = false;
    for (const auto& x : p) oob |= x.kind == ProblemKind::out_of_bounds;
    CHECK(oob);
  }
  SECTION("run naming a file that is not in the table") {
    ix.runs[0].file = 7;
    ix.link_chunks();
    auto p = check_index(ix);
    REQUIRE(!p.empty());
    CHECK(p[0].kind == ProblemKind::missing_file);
  }
  SECTION("missing file on disk") {
    auto p = check_files(ix, "/nonexistent-dir");
    REQUIRE(p.size() == 1);
    CHECK(p[0].kind == ProblemKind::missing_file);
    CHECK(p[0].key == "k");
  }
}

TEST_CASE("ckpt coverage: a million chunks in well under a second", "[ckpt]") {
  const uint64_t n = 1'000'000;
  auto ix = make_index(n * 4, {{0, n * 4}}, {}, 4);
  // Shuffle the chunk order so the sort is exercised too.
  std::reverse(ix.chunks.begin(), ix.chunks.end());
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = check_index(ix);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(p.empty());
  CHECK(s < 5.0);  // generous: the point is no quadratic blow-up
}
