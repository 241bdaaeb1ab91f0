// box_fill: a box of a whole tensor streamed in a writer's blocks equals the box cut out of the tensor
// element by element, for boxes cut along any axis (row- and column-parallel pieces, stacked 3-D
// pieces), blocks of any size, and runs read whole, close together or far apart.
#include <cstdint>
#include <cstring>
#include <vector>

#include "catch.h"
#include "core/shape.h"
#include "formats/dcp/megatron/box_fill.h"
#include "tools/fake_params.h"

using namespace fpg;
using namespace fpg::dcp;

namespace {

// One F32 tensor ("t", index 0) whose element i holds i.
test::FakeParams counting(std::vector<uint64_t> shape) {
  test::FakeParams p;
  p.add("t", std::move(shape));
  return p;
}

// The box's elements, row-major, by index arithmetic.
std::vector<float> expected(const std::vector<uint64_t>& shape, const Box& b) {
  std::vector<float> out;
  std::vector<uint64_t> at(shape.size(), 0);
  const uint64_t n = shape_volume(b.sizes);
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + b.offsets[d] + at[d];
    out.push_back(static_cast<float>(flat));
    for (size_t d = shape.size(); d-- > 0;) {
      if (++at[d] < b.sizes[d]) break;
      at[d] = 0;
    }
  }
  return out;
}

std::vector<float> filled(const test::FakeParams& src, const Box& b, size_t block) {
  const FillBytes fill = box_fill(src, 0, src.tensors()[0].shape, b, 4);
  const uint64_t bytes = 4 * shape_volume(b.sizes);
  std::vector<float> out(shape_volume(b.sizes));
  for (uint64_t off = 0; off < bytes; off += block)
    fill(off, reinterpret_cast<uint8_t*>(out.data()) + off, static_cast<size_t>(std::min<uint64_t>(block, bytes - off)));
  return out;
}

}  // namespace

TEST_CASE("box_fill: pieces along any axis, in blocks of any size") {
  struct Case {
    std::vector<uint64_t> shape;
    Box box;
  };
  const std::vector<Case> cases = {
      {{16, 8}, {{4, 0}, {4, 8}}},            // rows: one contiguous range
      {{16, 8}, {{0, 4}, {16, 4}}},           // columns: a row-parallel piece
      {{16, 8}, {{0, 0}, {16, 8}}},           // the whole tensor
      {{3, 12, 10}, {{1, 6, 0}, {2, 6, 10}}},  // stacked layers, rows of each
      {{3, 12, 10}, {{0, 0, 5}, {3, 12, 5}}},  // stacked layers, columns
      {{7}, {{2}, {5}}},                       // 1-D
      {{2, 3, 4, 5}, {{1, 1, 2, 1}, {1, 2, 2, 3}}},
  };
  for (const Case& c : cases)
    for (size_t block : {4, 12, 40, 4096}) {
      CAPTURE(shape_string(c.shape), shape_string(c.box.offsets), shape_string(c.box.sizes), block);
      const test::FakeParams src = counting(c.shape);
      CHECK(filled(src, c.box, block) == expected(c.shape, c.box));
    }
  // Narrow runs close together are read as enclosing ranges: far fewer reads than runs.
  const test::FakeParams wide = counting({4096, 64});
  const Box cols{{0, 16}, {4096, 16}};
  CHECK(filled(wide, cols, 1 << 20) == expected({4096, 64}, cols));
  CHECK(wide.reads < 16);
}
