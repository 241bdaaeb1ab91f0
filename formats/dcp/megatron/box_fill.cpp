#include "formats/dcp/megatron/box_fill.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace fpg::dcp {
namespace {

// Runs closer together than this are read as one enclosing range.
constexpr uint64_t kEnclosingBytes = 4ull << 20;

// The box as rows of contiguous runs of the tensor: the trailing dimensions the box covers whole
// merge into one run with the last dimension it cuts.
struct BoxRuns {
  std::vector<uint64_t> row_sizes;  // the box's sizes along the dimensions before the run's
  std::vector<uint64_t> strides;    // the tensor's element strides of those dimensions
  std::vector<uint64_t> row_offsets;
  uint64_t base = 0;  // the run's first element within a row (its offset along the cut dimension)
  uint64_t run = 1;   // elements per run
  uint64_t rows = 1;

  BoxRuns(const std::vector<uint64_t>& shape, const Box& box) {
    const size_t n = shape.size();
    if (n == 0) return;
    size_t k = n - 1;
    uint64_t inner = 1;
    while (k > 0 && box.sizes[k] == shape[k] && box.offsets[k] == 0) inner *= shape[k--];
    run = box.sizes[k] * inner;
    base = box.offsets[k] * inner;
    uint64_t stride = inner * shape[k];
    for (size_t d = k; d-- > 0;) {
      row_sizes.insert(row_sizes.begin(), box.sizes[d]);
      row_offsets.insert(row_offsets.begin(), box.offsets[d]);
      strides.insert(strides.begin(), stride);
      stride *= shape[d];
      rows *= box.sizes[d];
    }
  }

  // The tensor element where row `r` of the box begins.
  uint64_t start(uint64_t r) const {
    uint64_t at = base;
    for (size_t d = row_sizes.size(); d-- > 0;) {
      at += (row_offsets[d] + r % row_sizes[d]) * strides[d];
      r /= row_sizes[d];
    }
    return at;
  }
};

}  // namespace

FillBytes box_fill(const ckpt::ParamSource& src, size_t tensor, const std::vector<uint64_t>& shape, const Box& box,
                   uint64_t element_bytes, uint64_t* read_bytes) {
  auto runs = std::make_shared<BoxRuns>(shape, box);
  auto scratch = std::make_shared<std::vector<uint8_t>>();
  return [&src, tensor, element_bytes, read_bytes, runs, scratch](uint64_t offset, void* dst, size_t size) {
    const uint64_t E = element_bytes;
    if (offset % E || size % E) throw InternalError("box fill: a block that splits an element");
    const BoxRuns& R = *runs;
    auto* out = static_cast<uint8_t*>(dst);
    auto read = [&](uint64_t lo, uint64_t hi, uint8_t* to) {
      src.read(tensor, lo, hi, to);
      if (read_bytes) *read_bytes += (hi - lo) * E;
    };
    uint64_t a = offset / E;
    const uint64_t b = a + size / E;
    while (a < b) {
      const uint64_t row = a / R.run, within = a % R.run;
      if (within || b - a < R.run) {  // a part of one row
        const uint64_t n = std::min(R.run - within, b - a), at = R.start(row) + within;
        read(at, at + n, out);
        out += n * E;
        a += n;
        continue;
      }
      // Whole rows [row, last]: as one range where they are contiguous or close enough together.
      const uint64_t first = R.start(row);
      uint64_t last = row;
      while ((last + 2) * R.run <= b &&
             (R.start(last + 1) + R.run - first) * E <= std::max(kEnclosingBytes, R.run * E))
        ++last;
      const uint64_t count = last - row + 1, end = R.start(last) + R.run;
      if (count == 1 || end - first == count * R.run) {
        read(first, end, out);
      } else {
        scratch->resize((end - first) * E);
        read(first, end, scratch->data());
        for (uint64_t r = row; r <= last; ++r)
          std::memcpy(out + (r - row) * R.run * E, scratch->data() + (R.start(r) - first) * E, R.run * E);
      }
      out += count * R.run * E;
      a += count * R.run;
    }
    // The item's last block: its scratch goes now, not when every item of the rank file is written
    // (a writer holds all its items' fills from the start: kept, they grew with the layers per stage).
    if (b == R.rows * R.run) std::vector<uint8_t>().swap(*scratch);
  };
}

}  // namespace fpg::dcp
