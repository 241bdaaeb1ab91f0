#include "ckpt/layout_check.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "ckpt/coverage.h"

namespace fpg::ckpt {
namespace {

using layout::Range;

struct Ctx {
  const Index& ix;
  std::unordered_map<std::string, uint32_t> key_of;
  std::vector<std::vector<uint32_t>> chunks_of;  // per key
  std::vector<std::vector<Range>> padding_of;    // per key, sorted and merged
  std::set<uint32_t> expected;                   // keys the layout implies
  std::vector<Problem> out;

  explicit Ctx(const Index& index) : ix(index), chunks_of(index.keys.size()), padding_of(index.keys.size()) {
    for (uint32_t k = 0; k < ix.keys.size(); ++k) key_of.emplace(ix.keys[k].name, k);
    for (uint32_t c = 0; c < ix.chunks.size(); ++c) {
      const uint32_t run = ix.chunks[c].run;
      if (run < ix.runs.size() && ix.runs[run].key < ix.keys.size()) chunks_of[ix.runs[run].key].push_back(c);
    }
    for (const auto& p : ix.padding)
      if (p.key < ix.keys.size() && p.hi > p.lo) padding_of[p.key].push_back({p.lo, p.hi});
    for (auto& v : padding_of) v = merged(std::move(v));
  }

  static std::vector<Range> merged(std::vector<Range> v) {
    std::sort(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    std::vector<Range> m;
    for (const Range& r : v) {
      if (!m.empty() && r.begin <= m.back().end) m.back().end = std::max(m.back().end, r.end);
      else m.push_back(r);
    }
    return m;
  }

  std::string file_name(uint32_t chunk) const { return ix.run_file_name(ix.chunks[chunk].run); }
  bool rank_of(uint32_t chunk, uint32_t& rank) const {
    const uint32_t f = ix.runs[ix.chunks[chunk].run].file;
    if (f >= ix.files.size()) return false;
    rank = ix.files[f].rank;
    return true;
  }

  void mismatch(const std::string& key, uint64_t lo, uint64_t hi, const std::string& file, std::string msg) {
    out.push_back({ProblemKind::layout_mismatch, key, lo, hi, file, std::move(msg)});
  }

  // The key exists with a 1-D or given extent; returns its index or -1 (reported).
  long expect_key(const std::string& name, uint64_t numel, const std::string& why) {
    const auto it = key_of.find(name);
    if (it == key_of.end()) {
      mismatch(name, 0, numel, "", "missing: the layout implies this key (" + why + ")");
      return -1;
    }
    expected.insert(it->second);
    const Key& key = ix.keys[it->second];
    if (key.numel() != numel) {
      mismatch(name, 0, key.numel(), "",
               "extent " + std::to_string(key.numel()) + " (shape " + shape_string(key.shape) + "), the layout implies " +
                   std::to_string(numel) + " (" + why + ")");
      return -1;
    }
    return static_cast<long>(it->second);
  }

  void expect_padding(uint32_t k, const std::vector<Range>& want_in) {
    const std::vector<Range> want = merged(want_in);
    const std::vector<Range>& got = padding_of[k];
    const std::string& name = ix.keys[k].name;
    size_t i = 0;
    for (; i < std::min(want.size(), got.size()); ++i) {
      if (want[i] != got[i]) break;
    }
    if (i == want.size() && i == got.size()) return;
    if (i < got.size() && (i >= want.size() || got[i].begin < want[i].begin ||
                           (got[i].begin == want[i].begin && got[i].end != want[i].end))) {
      const std::string w = i < want.size() ? to_string(want[i]) : std::string("none");
      mismatch(name, got[i].begin, got[i].end, "", "declared padding differs from the layout's gap (next expected: " + w + ")");
    } else {
      mismatch(name, want[i].begin, want[i].end, "", "the layout has padding here that the index does not declare");
    }
  }

  // Every chunk of key k lies inside a range that its writing rank owns (`owned[rank]`, sorted).
  void expect_ownership(uint32_t k, const std::map<uint32_t, std::vector<Range>>& owned) {
    for (uint32_t c : chunks_of[k]) {
      const Chunk& ch = ix.chunks[c];
      uint32_t rank = 0;
      if (!rank_of(c, rank)) continue;  // reported by check_index
      const auto it = owned.find(rank);
      bool ok = false;
      if (it != owned.end()) {
        const auto& v = it->second;
        auto pos = std::upper_bound(v.begin(), v.end(), ch.offset, [](uint64_t x, const Range& r) { return x < r.begin; });
        if (pos != v.begin()) {
          --pos;
          ok = pos->begin <= ch.offset && ch.hi() <= pos->end;
        }
      }
      if (!ok) {
        std::string owners;
        for (const auto& [r, ranges] : owned)
          for (const Range& rg : ranges)
            if (rg.intersect({ch.offset, ch.hi()}).size() > 0) owners += (owners.empty() ? "" : ", ") + std::to_string(r);
        mismatch(ix.keys[k].name, ch.offset, ch.hi(), file_name(c),
                 "written by rank " + std::to_string(rank) + ", which does not own it" +
                     (owners.empty() ? std::string(" (no rank owns it)") : " (owner: rank " + owners + ")"));
      }
    }
  }

  void check_bucketed(const layout::BucketedLayout& L, StateLayout sl, const std::vector<std::string>& states) {
    if (sl == StateLayout::bucket) {
      for (uint32_t b = 0; b < L.buffers.size(); ++b) {
        const auto& buf = L.buffers[b];
        for (uint32_t bk = 0; bk < buf.buckets.size(); ++bk) {
          const auto& bucket = buf.buckets[bk];
          const uint64_t n = bucket.numel_unpadded;
          std::vector<Range> gaps;
          for (const Range& p : bucket.padding)
            if (p.begin < n) gaps.push_back({p.begin, std::min(p.end, n)});
          std::map<uint32_t, std::vector<Range>> owned;
          for (const auto& sh : bucket.shards) {
            const Range r = sh.world.shift_down(bucket.world.begin).intersect({0, n});
            if (!r.empty()) owned[sh.rank].push_back(r);
          }
          for (const auto& s : states) {
            const long k = expect_key(bucket_state_key(b, bk, s), n,
                                      "buffer " + std::to_string(b) + " bucket " + std::to_string(bk) + " numel_unpadded");
            if (k < 0) continue;
            expect_padding(static_cast<uint32_t>(k), gaps);
            expect_ownership(static_cast<uint32_t>(k), owned);
          }
        }
      }
      return;
    }
    // model: one key per (param, state); rank r owns the param ranges of its fragments.
    std::map<uint32_t, std::map<uint32_t, std::vector<Range>>> owned;  // param -> rank -> ranges
    for (uint32_t r = 0; r < L.dp; ++r)
      for (const auto& rf : layout::rank_fragments(L, r)) owned[rf.fragment.param][r].push_back(rf.fragment.param_range);
    for (auto& [p, m] : owned)
      for (auto& [r, v] : m) v = merged(std::move(v));
    for (const auto& buf : L.buffers)
      for (const auto& slot : buf.params)
        for (const auto& s : states) {
          const long k = expect_key(model_state_key(slot.name, s), slot.world.size(), "param " + slot.name + " numel");
          if (k < 0) continue;
          expect_padding(static_cast<uint32_t>(k), {});
          expect_ownership(static_cast<uint32_t>(k), owned[slot.param]);
        }
  }

  // Optimizer keys the layout does not imply; padding in any other key (weights and FP8 data are
  // stored whole: padding there would be a param read back as zeros).
  void report_unexpected() {
    for (uint32_t k = 0; k < ix.keys.size(); ++k) {
      const std::string& name = ix.keys[k].name;
      if (name.compare(0, kOptimizerPrefix.size(), kOptimizerPrefix) == 0) {
        if (!expected.count(k)) mismatch(name, 0, ix.keys[k].numel(), "", "optimizer-state key that the layout does not imply");
      } else {
        for (const Range& r : padding_of[k])
          mismatch(name, r.begin, r.end, "", "declared padding in a key stored whole (only optimizer state has gaps)");
      }
    }
  }
};

}  // namespace

std::vector<Problem> check_layout(const Index& index, const layout::BucketedLayout& L, StateLayout sl,
                                  const std::vector<std::string>& states) {
  Ctx ctx(index);
  ctx.check_bucketed(L, sl, states);
  ctx.report_unexpected();
  return std::move(ctx.out);
}

std::vector<Problem> check_layout(const Index& index, const layout::LayerWiseLayout& L, StateLayout sl,
                                  const std::vector<std::string>& states) {
  return check_layout(index, L, sl, states, states);
}

std::vector<Problem> check_layout(const Index& index, const layout::LayerWiseLayout& L, StateLayout sl,
                                  const std::vector<std::string>& states,
                                  const std::vector<std::string>& matrix_states) {
  Ctx ctx(index);
  for (const auto& m : L.matrices)
    for (const auto& s : matrix_states) {
      const long k = ctx.expect_key(model_state_key(m.name, s), m.numel(), "matrix " + m.name + " owned whole");
      if (k < 0) continue;
      ctx.expect_padding(static_cast<uint32_t>(k), {});
      ctx.expect_ownership(static_cast<uint32_t>(k), {{m.owner, {Range{0, m.numel()}}}});
    }
  ctx.check_bucketed(L.scalar, sl, states);
  ctx.report_unexpected();
  return std::move(ctx.out);
}

}  // namespace fpg::ckpt
