#include "formats/fpckpt/diff.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/float_codec.h"

namespace fpg::fpckpt {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

Ranges data_ranges(const CheckpointReader& r, uint32_t key) {
  Ranges out;
  for (uint32_t c : r.chunks_of(key)) {
    const auto& ch = r.index().chunks[c];
    if (!out.empty() && ch.offset <= out.back().second) out.back().second = std::max(out.back().second, ch.hi());
    else out.push_back({ch.offset, ch.hi()});
  }
  return out;
}

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

bool decode_float(const uint8_t* p, DType t, double& v) {
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, p, 4); v = f; return true; }
    case DType::F64: std::memcpy(&v, p, 8); return true;
    case DType::BF16: { uint16_t h; std::memcpy(&h, p, 2); v = float_from_bf16(h); return true; }
    case DType::F16: { uint16_t h; std::memcpy(&h, p, 2); v = float_from_fp16(h); return true; }
    case DType::F8_E4M3: v = float_from_e4m3(*p); return true;
    case DType::F8_E5M2: v = float_from_e5m2(*p); return true;
    case DType::F8_E8M0: v = float_from_e8m0(*p); return true;
    default: return false;
  }
}

std::string value_text(const uint8_t* p, DType t, size_t elem) {
  double v;
  char buf[64];
  if (decode_float(p, t, v)) {
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
  }
  std::string s = "0x";
  for (size_t i = elem; i-- > 0;) {
    std::snprintf(buf, sizeof buf, "%02x", p[i]);
    s += buf;
  }
  return s;
}

}  // namespace

DiffReport diff_checkpoints(const CheckpointReader& A, const CheckpointReader& B, const DiffOptions& o) {
  DiffReport rep;
  std::map<std::string, std::pair<long, long>> keys;
  for (size_t k = 0; k < A.index().keys.size(); ++k) keys[A.index().keys[k].name].first = static_cast<long>(k);
  for (auto& [n, p] : keys) p.second = -1;
  for (size_t k = 0; k < B.index().keys.size(); ++k) {
    auto it = keys.find(B.index().keys[k].name);
    if (it == keys.end()) keys[B.index().keys[k].name] = {-1, static_cast<long>(k)};
    else it->second.second = static_cast<long>(k);
  }
  std::vector<uint8_t> buf_a, buf_b;
  for (const auto& [name, ab] : keys) {
    if (ab.second < 0) { rep.diffs.push_back({name, "only in A", "", 0, 0, {}}); continue; }
    if (ab.first < 0) { rep.diffs.push_back({name, "only in B", "", 0, 0, {}}); continue; }
    const auto ka = static_cast<uint32_t>(ab.first), kb = static_cast<uint32_t>(ab.second);
    const ckpt::Key& a = A.index().keys[ka];
    const ckpt::Key& b = B.index().keys[kb];
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
    const Ranges ra = data_ranges(A, ka), rb = data_ranges(B, kb);
    const Ranges both = intersect(ra, rb);
    const uint64_t only_a = total(ra) - total(both), only_b = total(rb) - total(both);
    if (only_a || only_b)
      rep.diffs.push_back({name, "coverage",
                           std::to_string(only_a) + " elements are data in A only, " + std::to_string(only_b) +
                               " in B only (padding or gap in the other)",
                           only_a + only_b, 0, {}});
    const size_t elem = dtype_bits(a.dtype) / 8;
    double probe;
    const bool is_float = elem > 0 && decode_float(reinterpret_cast<const uint8_t*>("\0\0\0\0\0\0\0\0"), a.dtype, probe);
    KeyDiff kd{name, "values", "", 0, 0, {}};
    for (const auto& [lo, hi] : both) {
      for (uint64_t x = lo; x < hi; x += o.block_elems) {
        const uint64_t y = std::min(hi, x + o.block_elems);
        buf_a.resize((y - x) * elem);
        buf_b.resize((y - x) * elem);
        A.read(ka, x, y, buf_a.data(), o.pool);
        B.read(kb, x, y, buf_b.data(), o.pool);
        rep.elements_compared += y - x;
        if (std::memcmp(buf_a.data(), buf_b.data(), buf_a.size()) == 0) continue;
        for (uint64_t i = 0; i < y - x; ++i) {
          const uint8_t* pa = buf_a.data() + i * elem;
          const uint8_t* pb = buf_b.data() + i * elem;
          if (std::memcmp(pa, pb, elem) == 0) continue;
          bool differ = true;
          if (is_float) {
            double va = 0, vb = 0;
            decode_float(pa, a.dtype, va);
            decode_float(pb, a.dtype, vb);
            if (std::isnan(va) && std::isnan(vb)) differ = false;
            else if (std::fabs(va - vb) <= o.atol + o.rtol * std::fabs(vb)) differ = false;
            else if (!std::isnan(va) && !std::isnan(vb)) kd.max_abs = std::max(kd.max_abs, std::fabs(va - vb));
          }
          if (!differ) continue;
          ++kd.differing;
          if (kd.first.size() < o.max_reports)
            kd.first.push_back({x + i, value_text(pa, a.dtype, elem), value_text(pb, a.dtype, elem)});
        }
      }
    }
    if (kd.differing) {
      kd.detail = std::to_string(kd.differing) + " of " + std::to_string(total(both)) + " elements differ";
      rep.diffs.push_back(std::move(kd));
    }
  }
  return rep;
}

}  // namespace fpg::fpckpt
