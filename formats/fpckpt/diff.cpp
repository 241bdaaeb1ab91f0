#include "formats/fpckpt/diff.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "ckpt/state_view.h"
#include "core/progress.h"

namespace fpg::fpckpt {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

// Data ranges of `v`: its source key's chunks inside [offset, offset + numel), shifted to the view.
Ranges data_ranges(const CheckpointReader& r, const struct ViewKey& v);

Ranges intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.push_back({lo, hi});
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

uint64_t total(const Ranges& r) {
  uint64_t n = 0;
  for (const auto& x : r) n += x.second - x.first;
  return n;
}

// A key as diff compares it: a stored key (offset 0), or a param's state inside a bucket key.
struct ViewKey {
  ckpt::Key key;
  uint32_t source = 0;
  uint64_t offset = 0;
};

Ranges data_ranges(const CheckpointReader& r, const ViewKey& v) {
  Ranges out;
  const uint64_t lo = v.offset, hi = v.offset + v.key.numel();
  for (uint32_t c : r.chunks_of(v.source)) {
    const auto& ch = r.index().chunks[c];
    const uint64_t a = std::max(lo, ch.offset), b = std::min(hi, ch.hi());
    if (a >= b) continue;
    if (!out.empty() && a - lo <= out.back().second) out.back().second = std::max(out.back().second, b - lo);
    else out.push_back({a - lo, b - lo});
  }
  return out;
}

// Stored keys by name; with `model_space`, bucket keys replaced by the params' states they hold.
std::map<std::string, ViewKey> view_keys(const CheckpointReader& r, const std::optional<std::vector<ckpt::ViewedState>>& states,
                                         bool model_space) {
  std::map<std::string, ViewKey> out;
  std::vector<char> hidden(r.index().keys.size(), 0);
  if (model_space && states)
    for (const auto& s : *states) {
      hidden[s.source] = 1;
      out[s.key.name] = {s.key, s.source, s.offset};
    }
  for (uint32_t k = 0; k < r.index().keys.size(); ++k)
    if (!hidden[k]) out.emplace(r.index().keys[k].name, ViewKey{r.index().keys[k], k, 0});
  return out;
}

// Two bucket views place every param's state alike: compare the bucket keys as stored.
bool same_places(const CheckpointReader& a, const std::vector<ckpt::ViewedState>& va, const CheckpointReader& b,
                 const std::vector<ckpt::ViewedState>& vb) {
  if (va.size() != vb.size()) return false;
  for (size_t i = 0; i < va.size(); ++i)
    if (va[i].key.name != vb[i].key.name || va[i].offset != vb[i].offset ||
        a.index().keys[va[i].source].name != b.index().keys[vb[i].source].name)
      return false;
  return true;
}

}  // namespace

DiffReport diff_checkpoints(const CheckpointReader& A, const CheckpointReader& B, const DiffOptions& o) {
  DiffReport rep;
  // Bucket-layout state compares in model space unless both place every param alike.
  const auto sa = ckpt::bucket_state_view(A.index()), sb = ckpt::bucket_state_view(B.index());
  const bool model_space = (sa || sb) && !(sa && sb && same_places(A, *sa, B, *sb));
  rep.model_space = model_space;
  const auto keys_a = view_keys(A, sa, model_space), keys_b = view_keys(B, sb, model_space);
  std::map<std::string, std::pair<const ViewKey*, const ViewKey*>> keys;
  for (const auto& [n, v] : keys_a) keys[n].first = &v;
  for (const auto& [n, v] : keys_b) keys[n].second = &v;
  uint64_t to_read = 0;  // bytes both sides read
  for (const auto& [name, ab] : keys)
    if (ab.first && ab.second && ab.first->key.dtype == ab.second->key.dtype && ab.first->key.shape == ab.second->key.shape)
      to_read += 2 * dtype_bytes(ab.first->key.dtype, total(intersect(data_ranges(A, *ab.first), data_ranges(B, *ab.second))));
  if (o.progress) o.progress->set_total(to_read);
  std::vector<uint8_t> buf_a, buf_b;
  for (const auto& [name, ab] : keys) {
    if (ckpt::ignored(o, name)) continue;
    if (!ab.second) { rep.diffs.push_back({name, "only in A", "", 0, 0, {}}); continue; }
    if (!ab.first) { rep.diffs.push_back({name, "only in B", "", 0, 0, {}}); continue; }
    const ViewKey& va = *ab.first;
    const ViewKey& vb = *ab.second;
    const ckpt::Key& a = va.key;
    const ckpt::Key& b = vb.key;
    if (a.dtype != b.dtype) {
      rep.diffs.push_back({name, "dtype", std::string(dtype_name(a.dtype)) + " vs " + std::string(dtype_name(b.dtype)), 0, 0, {}});
      continue;
    }
    if (a.shape != b.shape) {
      rep.diffs.push_back({name, "shape", shape_string(a.shape) + " vs " + shape_string(b.shape), 0, 0, {}});
      continue;
    }
    if (a.kind != b.kind)
      rep.diffs.push_back({name, "kind", std::string(ckpt::kind_name(a.kind)) + " vs " + std::string(ckpt::kind_name(b.kind)), 0, 0, {}});
    ++rep.keys_compared;
    const Ranges ra = data_ranges(A, va), rb = data_ranges(B, vb);
    const Ranges both = intersect(ra, rb);
    const uint64_t only_a = total(ra) - total(both), only_b = total(rb) - total(both);
    if (only_a || only_b)
      rep.diffs.push_back({name, "coverage",
                           std::to_string(only_a) + " elements are data in A only, " + std::to_string(only_b) +
                               " in B only (padding or gap in the other)",
                           only_a + only_b, 0, {}});
    const size_t elem = static_cast<size_t>(std::max(dtype_bits(a.dtype) / 8, 1));
    KeyDiff kd{name, "values", "", 0, 0, {}};
    for (const auto& [lo, hi] : both) {
      for (uint64_t x = lo; x < hi; x += o.block_elems) {
        const uint64_t y = std::min(hi, x + o.block_elems);
        buf_a.resize((y - x) * elem);
        buf_b.resize((y - x) * elem);
        A.read(va.source, va.offset + x, va.offset + y, buf_a.data(), o.pool);
        B.read(vb.source, vb.offset + x, vb.offset + y, buf_b.data(), o.pool);
        rep.elements_compared += y - x;
        ckpt::compare_values(buf_a.data(), buf_b.data(), a.dtype, x, y - x, o, kd);
        if (o.progress) o.progress->advance(2 * dtype_bytes(a.dtype, y - x));
      }
    }
    if (kd.differing) {
      ckpt::describe_values(kd, total(both));
      rep.diffs.push_back(std::move(kd));
    }
  }
  return rep;
}

}  // namespace fpg::fpckpt
