#include "layout/describe.h"

#include <algorithm>

#include <fmt/format.h>

#include "layout/padding.h"

namespace fpg::layout {
namespace {

std::string rs(const Range& r) { return to_string(r); }

size_t name_width(const BucketedLayout& l) {
  size_t w = 5;
  for (const auto& b : l.buffers)
    for (const auto& s : b.params) w = std::max(w, s.name.size());
  return w;
}

}  // namespace

std::string describe(const BucketedLayout& l) {
  std::string out = fmt::format("bucketed layout: dp {}, bucket_size {}, pad_for_nccl {} (bucket ends padded to {})\n",
                                l.dp, l.bucket_size ? std::to_string(*l.bucket_size) : "none",
                                l.pad_for_nccl ? "on" : "off", bucket_end_divisor(l.dp, l.pad_for_nccl));
  if (l.buffers.empty()) out += "  (no params)\n";
  const size_t w = name_width(l);
  for (size_t bi = 0; bi < l.buffers.size(); ++bi) {
    const Buffer& b = l.buffers[bi];
    out += fmt::format("buffer {} {}: {} elements, {} bucket(s), {} param(s)\n", bi, to_string(b.key), b.numel,
                       b.buckets.size(), b.params.size());
    for (size_t ki = 0; ki < b.buckets.size(); ++ki) {
      const Bucket& k = b.buckets[ki];
      out += fmt::format("  bucket {}: {} numel_unpadded {} padded {} shard {}\n", ki, rs(k.world),
                         k.numel_unpadded, k.numel(), k.shard_numel);
      out += fmt::format("    {:<{}}  {:>24}  {:>12}\n", "param", w, "buffer range", "numel");
      for (uint64_t s = k.slots.begin; s < k.slots.end; ++s) {
        const ParamSlot& p = b.params[s];
        out += fmt::format("    {:<{}}  {:>24}  {:>12}\n", p.name, w, rs(p.world), p.world.size());
      }
      out += "    padding (bucket offsets):";
      for (const Range& r : k.padding) out += " " + rs(r);
      out += k.padding.empty() ? " none\n" : "\n";
      for (const Shard& sh : k.shards) {
        out += fmt::format("    rank {} shard {}{}\n", sh.rank, rs(sh.world),
                           sh.fragments.empty() ? " owns no param" : "");
        // Fragments and padding merged in offset order, so each shard reads left to right.
        size_t fi = 0, pi = 0;
        while (fi < sh.fragments.size() || pi < sh.padding.size()) {
          if (pi == sh.padding.size() ||
              (fi < sh.fragments.size() && sh.fragments[fi].world_in_bucket.begin < sh.padding[pi].begin)) {
            const Fragment& f = sh.fragments[fi++];
            out += fmt::format("      {:<{}}  param {:>22}  bucket {:>22}  local {:>22}\n", b.params[f.slot].name, w,
                               rs(f.param_range), rs(f.world_in_bucket), rs(f.local));
          } else {
            out += fmt::format("      {:<{}}  {:>28}  bucket {:>22}\n", "(pad)", w, "", rs(sh.padding[pi++]));
          }
        }
      }
    }
  }
  return out;
}

std::string describe(const LayerWiseLayout& l) {
  std::string out = fmt::format("layer-wise layout: dp {}, {} Muon matri{} (fp32-kept matrices {})\n", l.dp,
                                l.matrices.size(), l.matrices.size() == 1 ? "x" : "ces",
                                l.fp32_matrices ? "included" : "on the scalar layout");
  size_t w = 5;
  for (const auto& m : l.matrices) w = std::max(w, m.name.size());
  out += fmt::format("  {:<{}}  {:>5}  {:>14}  {:>12}  {:>22}  {:>5}  {:>12}\n", "param", w, "dtype", "shape", "numel",
                     "Newton-Schulz cost", "owner", "slab offset");
  for (const auto& m : l.matrices)
    out += fmt::format("  {:<{}}  {:>5}  {:>14}  {:>12}  {:>22}  {:>5}  {:>12}\n", m.name, w, dtype_name(m.dtype),
                       fmt::format("[{}, {}]", m.rows, m.cols), m.numel(), m.cost, m.owner, m.offset);
  out += "  rank  matrices                   cost";
  for (const auto& g : l.groups) out += fmt::format("  {:>14}", fmt::format("{} gather", dtype_name(g.dtype)));
  out += "\n";
  for (const auto& r : l.ranks) {
    out += fmt::format("  {:>4}  {:>8}  {:>21}", r.rank, r.owned.size(), r.cost);
    for (const auto& g : l.groups) out += fmt::format("  {:>14}", g.sizes[r.rank]);
    out += "\n";
  }
  out += "scalar optimizer params:\n";
  out += describe(l.scalar);
  return out;
}

}  // namespace fpg::layout
