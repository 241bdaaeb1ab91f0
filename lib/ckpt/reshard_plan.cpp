#include "ckpt/reshard_plan.h"

#include <algorithm>

namespace fpg::ckpt {

std::vector<uint32_t> intersecting_chunks(const Index& ix, const std::vector<uint32_t>& by_key, uint64_t lo,
                                          uint64_t hi) {
  std::vector<uint32_t> out;
  if (lo >= hi) return out;
  auto it = std::partition_point(by_key.begin(), by_key.end(), [&](uint32_t c) { return ix.chunks[c].hi() <= lo; });
  for (; it != by_key.end() && ix.chunks[*it].offset < hi; ++it)
    if (ix.chunks[*it].length > 0) out.push_back(*it);
  return out;
}

PlanSummary summarize(const ReshardPlan& plan, const Index& src, const std::vector<std::vector<uint32_t>>& by_key) {
  PlanSummary s;
  s.keys = plan.keys.size();
  std::vector<char> seen(src.chunks.size(), 0);
  for (const RankPlan& rp : plan.ranks) {
    uint64_t bytes = 0;
    for (const CopyRun& r : rp.runs) {
      const uint64_t b = dtype_bytes(plan.keys[r.key].dtype, r.numel);
      bytes += b;
      s.elements += r.numel;
      ++s.runs;
      for (uint32_t c : intersecting_chunks(src, by_key.at(r.src_key), r.src_lo, r.src_lo + r.numel)) {
        ++s.chunk_reads;
        if (!seen[c]) {
          seen[c] = 1;
          ++s.source_chunks;
          s.bytes_read += src.chunks[c].stored_bytes;
        }
      }
    }
    s.padding += rp.padding.size();
    s.bytes_written += bytes;
    s.rank_bytes.push_back(bytes);
    if (!rp.runs.empty()) ++s.files;
  }
  return s;
}

}  // namespace fpg::ckpt
