// Exact coverage of an n-D tensor by boxes (DCP chunks): where two boxes overlap and which parts no
// box covers, each reported as a box.
//
// Slab sweep: along dimension 0 the boxes' starts and ends cut the extent into slabs in which the
// same boxes are present; each slab recurses into dimension 1 with those boxes, and the last
// dimension is a sorted 1-D sweep. For row-, column- or grid-sharded tensors this visits each box
// O(d) times after sorting: O(n log n). Layouts where many long boxes span many short ones cost more;
// a work budget bounds that, after which only DCP's own rule (volumes summing to the tensor's) is
// applied and the result says the search stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fpg::dcp {

struct Box {
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> sizes;
};

// A box whose offsets and sizes (shape.size() of each) live elsewhere, e.g. in a ChunkMeta.
struct BoxView {
  const uint64_t* offsets;
  const uint64_t* sizes;
};

struct CoverageIssue {
  enum class Kind : uint8_t { gap, overlap } kind = Kind::gap;
  Box box;          // the uncovered box, or the first box where the two chunks overlap
  size_t a = 0, b = 0;  // overlap: the two boxes' indices
};

struct CoverageResult {
  std::vector<CoverageIssue> issues;  // in sweep order, at most max_issues
  uint64_t more_gaps = 0;             // gaps and overlaps found beyond max_issues
  uint64_t more_overlaps = 0;
  bool budget_exceeded = false;       // the sweep stopped; `issues` is then what volume alone shows
};

// Whether a box inside `shape` (shape.size() offsets and sizes) is one run of the row-major order:
// size 1 in the dimensions before some k, the whole extent in those after it.
bool is_row_major_run(const std::vector<uint64_t>& shape, const uint64_t* offsets, const uint64_t* sizes);

// `boxes` must each have shape.size() offsets and sizes and lie inside `shape` (validate.h reports
// those that do not and leaves them out). Boxes of zero volume cover nothing and are ignored.
// Boxes that are each one run of the row-major order (row-sharded chunks, the usual case) and tile
// the tensor are recognised in one pass over them sorted by start, before any sweep.
CoverageResult check_box_coverage(const std::vector<uint64_t>& shape, const std::vector<BoxView>& boxes,
                                  size_t max_issues = 100, uint64_t work_budget = uint64_t{1} << 27);
CoverageResult check_box_coverage(const std::vector<uint64_t>& shape, const std::vector<Box>& boxes,
                                  size_t max_issues = 100, uint64_t work_budget = uint64_t{1} << 27);

}  // namespace fpg::dcp
