// What inspect shows of a checkpoint index: describe_key lists a key's chunks by offset and its
// padding, and lists a broken index as it is instead of following its references.
#include "catch.h"
#include "formats/fpckpt/summary.h"

using namespace fpg;
using namespace fpg::ckpt;

namespace {

// Key "k" (F32, 12 elements): run 0 in file 0 holds [4, 12) in chunks of 4 (listed last first),
// [0, 4) is padding.
Index two_chunk_index() {
  Index ix;
  ix.keys.push_back({"k", DType::F32, {12}, KeyKind::weight});
  ix.files.push_back({"rank-00000.h5", 0, 100});
  ix.runs.push_back({0, 7, 0, 4, 4, 8, DType::F32, 0});
  for (uint64_t off : {8, 4}) {
    Chunk c;
    c.run = 0;
    c.offset = off;
    c.length = 4;
    c.stored_bytes = 16;
    ix.chunks.push_back(c);
  }
  ix.padding.push_back({0, 0, 4});
  ix.link_chunks();
  return ix;
}

}  // namespace

TEST_CASE("describe_key: chunks by offset with file, dataset and chunk number; padding", "[ckpt]") {
  const auto d = fpckpt::describe_key(two_chunk_index(), 0);
  REQUIRE(d.chunks.size() == 2);
  CHECK(d.chunks[0].lo == 4);
  CHECK(d.chunks[0].hi == 8);
  CHECK(d.chunks[0].file == "rank-00000.h5");
  CHECK(d.chunks[0].dataset == 7);
  CHECK(d.chunks[0].chunk == std::optional<uint64_t>(0));
  CHECK(d.chunks[1].chunk == std::optional<uint64_t>(1));
  REQUIRE(d.padding.size() == 1);
  CHECK(d.padding[0] == std::make_pair(uint64_t{0}, uint64_t{4}));
}

TEST_CASE("describe_key: a run naming no file, 0-element chunks or a chunk before the run", "[ckpt]") {
  Index ix = two_chunk_index();
  ix.runs[0].file = 0xffffffffu;
  auto d = fpckpt::describe_key(ix, 0);
  REQUIRE(d.chunks.size() == 2);
  CHECK(d.chunks[0].file.empty());

  ix = two_chunk_index();
  ix.runs[0].chunk_elems = 0;
  d = fpckpt::describe_key(ix, 0);
  CHECK_FALSE(d.chunks[0].chunk.has_value());

  ix = two_chunk_index();
  ix.chunks[1].offset = 0;  // before the run's lo = 4
  d = fpckpt::describe_key(ix, 0);
  CHECK_FALSE(d.chunks[0].chunk.has_value());
  CHECK(d.chunks[1].chunk == std::optional<uint64_t>(1));

  ix = two_chunk_index();
  ix.chunks[0].run = 5;  // no such run: not this key's
  CHECK(fpckpt::describe_key(ix, 0).chunks.size() == 1);
}
