// The layer-wise layout (Megatron-Core's LayerWiseDistributedOptimizer): each Muon-managed matrix is
// owned whole by one rank, because Newton-Schulz needs the whole matrix; every other param (vectors,
// embedding and output, fp32-kept params by default) goes on a bucketed layout for the scalar
// optimizer, as Megatron chains a LayerWiseDistributedOptimizer with a normal distributed optimizer.
//
// Assignment: greedy LPT. Matrices are sorted by Newton-Schulz cost max(m,n)*min(m,n)^2, largest
// first, ties broken by numel (larger first) and then registration index (smaller first) — a total
// order, so every rank computes the identical assignment from the spec alone. Each goes to the rank
// with the least accumulated cost, ties to the lowest rank. Ranks may own nothing (dp > #matrices).
//
// After the step each owner's matrices travel in an uneven all-gather, one per dtype ("gather
// group": BF16 staged, F32 native, never mixed in one flat buffer). A rank's slab in a group packs its
// owned matrices of that dtype in registration order; OwnedMatrix::offset is the position in it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "layout/bucketed_layout.h"

namespace fpg::layout {

struct LayerWiseOptions {
  // Also hand fp32-kept matrices to Muon (Megatron's routing: keep_in_fp32 does not exclude a param
  // from the layer-wise optimizer); they then gather in their own F32 group. Default: they stay on
  // the scalar optimizer's bucketed layout.
  bool fp32_matrices = false;
};

// Newton-Schulz cost of an m x n matrix: max(m,n) * min(m,n)^2. UsageError if it overflows 64 bits.
uint64_t newton_schulz_cost(uint64_t m, uint64_t n);

struct OwnedMatrix {
  uint32_t param = 0;  // index in ModelSpec::params
  std::string name;
  DType dtype = DType::BF16;  // the param's dtype: picks its gather group
  uint64_t rows = 0, cols = 0;
  uint64_t cost = 0;     // newton_schulz_cost(rows, cols)
  uint32_t owner = 0;    // the rank that updates it
  uint64_t offset = 0;   // in the owner's slab of its gather group

  uint64_t numel() const { return rows * cols; }
};

struct LayerWiseRank {
  uint32_t rank = 0;
  uint64_t cost = 0;            // sum of its matrices' costs
  std::vector<uint32_t> owned;  // indices into LayerWiseLayout::matrices, registration order
};

// One uneven all-gather: rank r contributes sizes[r] elements of `dtype` at displs[r] of a
// receive buffer of `total` elements.
struct GatherGroup {
  DType dtype = DType::BF16;
  std::vector<uint64_t> sizes;   // per rank: sum of owned numel of this dtype (0 for empty ranks)
  std::vector<uint64_t> displs;  // exclusive prefix sums of sizes
  uint64_t total = 0;
};

struct LayerWiseLayout {
  uint32_t dp = 1;
  bool fp32_matrices = false;
  std::vector<OwnedMatrix> matrices;  // the Muon-managed params, registration order
  std::vector<LayerWiseRank> ranks;   // one per rank
  std::vector<GatherGroup> groups;    // one per matrix dtype, order of first appearance
  BucketedLayout scalar;              // every other param

  // The rank owning spec param `param` whole, or nothing if it is not a Muon-managed matrix.
  std::optional<uint32_t> owner(uint32_t param) const;
  // Index into `groups` for dtype, or nothing.
  std::optional<size_t> group(DType dtype) const;
};

bool operator==(const OwnedMatrix& a, const OwnedMatrix& b);
bool operator==(const LayerWiseRank& a, const LayerWiseRank& b);
bool operator==(const GatherGroup& a, const GatherGroup& b);
bool operator==(const LayerWiseLayout& a, const LayerWiseLayout& b);
inline bool operator!=(const LayerWiseLayout& a, const LayerWiseLayout& b) { return !(a == b); }

// Whether the layer-wise layout gives param `p` to Muon: role matrix, 2-D, and not fp32-kept unless
// opts.fp32_matrices.
bool layer_wise_managed(const model::Param& p, const LayerWiseOptions& opts);

// scalar_opts.dp is the number of ranks; the other scalar_opts shape the non-Muon bucketed layout.
LayerWiseLayout build_layer_wise_layout(const model::ModelSpec& spec, const BucketedOptions& scalar_opts,
                                        const LayerWiseOptions& opts = {});

// Derives ranks, owners' offsets and groups from `matrices` (their owners already set) for dp ranks.
// build_layer_wise_layout and the JSON reader share it.
void pack_layer_wise(LayerWiseLayout& layout);

}  // namespace fpg::layout
