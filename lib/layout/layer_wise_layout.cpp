#include "layout/layer_wise_layout.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace fpg::layout {
namespace {

// Costs are summed per rank; a pathological JSON spec must not wrap around and reorder ranks.
uint64_t add_saturating(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}

}  // namespace

bool operator==(const OwnedMatrix& a, const OwnedMatrix& b) {
  return a.param == b.param && a.name == b.name && a.dtype == b.dtype && a.rows == b.rows &&
         a.cols == b.cols && a.cost == b.cost && a.owner == b.owner && a.offset == b.offset;
}
bool operator==(const LayerWiseRank& a, const LayerWiseRank& b) {
  return a.rank == b.rank && a.cost == b.cost && a.owned == b.owned;
}
bool operator==(const GatherGroup& a, const GatherGroup& b) {
  return a.dtype == b.dtype && a.sizes == b.sizes && a.displs == b.displs && a.total == b.total;
}
bool operator==(const LayerWiseLayout& a, const LayerWiseLayout& b) {
  return a.dp == b.dp && a.fp32_matrices == b.fp32_matrices && a.matrices == b.matrices && a.ranks == b.ranks &&
         a.groups == b.groups && a.scalar == b.scalar;
}

std::optional<uint32_t> LayerWiseLayout::owner(uint32_t param) const {
  for (const auto& m : matrices)
    if (m.param == param) return m.owner;
  return std::nullopt;
}

std::optional<size_t> LayerWiseLayout::group(DType dtype) const {
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].dtype == dtype) return g;
  return std::nullopt;
}

uint64_t newton_schulz_cost(uint64_t m, uint64_t n) {
  const uint64_t hi = std::max(m, n), lo = std::min(m, n);
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (lo != 0 && (lo > kMax / lo || hi > kMax / (lo * lo)))
    throw UsageError("Newton-Schulz cost of a " + std::to_string(m) + " x " + std::to_string(n) +
                     " matrix overflows 64 bits");
  return hi * lo * lo;
}

bool layer_wise_managed(const model::Param& p, const LayerWiseOptions& opts) {
  return p.role == model::Role::matrix && p.is_2d() && (!p.keep_in_fp32 || opts.fp32_matrices);
}

void pack_layer_wise(LayerWiseLayout& layout) {
  const uint32_t dp = layout.dp;
  layout.ranks.assign(dp, LayerWiseRank{});
  for (uint32_t r = 0; r < dp; ++r) layout.ranks[r].rank = r;
  layout.groups.clear();
  for (const auto& m : layout.matrices)
    if (!layout.group(m.dtype)) layout.groups.push_back({m.dtype, std::vector<uint64_t>(dp, 0), {}, 0});

  // matrices are in registration order, so each slab packs in registration order.
  for (size_t i = 0; i < layout.matrices.size(); ++i) {
    OwnedMatrix& m = layout.matrices[i];
    LayerWiseRank& rk = layout.ranks[m.owner];
    GatherGroup& g = layout.groups[*layout.group(m.dtype)];
    m.offset = g.sizes[m.owner];
    g.sizes[m.owner] += m.numel();
    rk.cost = add_saturating(rk.cost, m.cost);
    rk.owned.push_back(static_cast<uint32_t>(i));
  }
  for (auto& g : layout.groups) {
    g.displs.assign(dp, 0);
    std::exclusive_scan(g.sizes.begin(), g.sizes.end(), g.displs.begin(), uint64_t{0});
    g.total = std::accumulate(g.sizes.begin(), g.sizes.end(), uint64_t{0});
  }
}

LayerWiseLayout build_layer_wise_layout(const model::ModelSpec& spec, const BucketedOptions& scalar_opts,
                                        const LayerWiseOptions& opts) {
  if (scalar_opts.dp == 0) throw UsageError("layout: dp must be at least 1");
  LayerWiseLayout layout;
  layout.dp = scalar_opts.dp;
  layout.fp32_matrices = opts.fp32_matrices;

  std::vector<uint32_t> rest;
  for (uint32_t i = 0; i < spec.params.size(); ++i) {
    const model::Param& p = spec.params[i];
    if (!layer_wise_managed(p, opts)) {
      rest.push_back(i);
      continue;
    }
    OwnedMatrix m;
    m.param = i;
    m.name = p.name;
    m.dtype = p.dtype;
    m.rows = p.shape[0];
    m.cols = p.shape[1];
    m.cost = newton_schulz_cost(m.rows, m.cols);
    layout.matrices.push_back(std::move(m));
  }

  // LPT in the total order (cost desc, numel desc, registration index asc).
  std::vector<size_t> order(layout.matrices.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const OwnedMatrix& x = layout.matrices[a];
    const OwnedMatrix& y = layout.matrices[b];
    if (x.cost != y.cost) return x.cost > y.cost;
    if (x.numel() != y.numel()) return x.numel() > y.numel();
    return x.param < y.param;
  });
  std::vector<uint64_t> load(layout.dp, 0);
  for (size_t i : order) {
    // Least loaded, lowest rank on ties (min_element returns the first minimum).
    const uint32_t r = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    OwnedMatrix& m = layout.matrices[i];
    m.owner = r;
    load[r] = add_saturating(load[r], m.cost);
  }
  pack_layer_wise(layout);
  layout.scalar = build_bucketed_layout(spec, scalar_opts, rest);
  return layout;
}

}  // namespace fpg::layout
