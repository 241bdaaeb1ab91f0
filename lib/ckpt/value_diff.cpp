#include "ckpt/value_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <fnmatch.h>

#include "core/float_codec.h"

namespace fpg::ckpt {

bool ignored(const DiffOptions& o, const std::string& name) {
  for (const std::string& g : o.ignore)
    if (::fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}
namespace {

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

void compare_values(const uint8_t* a, const uint8_t* b, DType t, uint64_t first, uint64_t n, const DiffOptions& o,
                    KeyDiff& kd) {
  const size_t elem = static_cast<size_t>(std::max(dtype_bits(t) / 8, 1));
  if (std::memcmp(a, b, n * elem) == 0) return;
  double probe;
  const bool is_float = decode_float(reinterpret_cast<const uint8_t*>("\0\0\0\0\0\0\0\0"), t, probe);
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* pa = a + i * elem;
    const uint8_t* pb = b + i * elem;
    if (std::memcmp(pa, pb, elem) == 0) continue;
    if (is_float) {
      double va = 0, vb = 0;
      decode_float(pa, t, va);
      decode_float(pb, t, vb);
      if (std::isnan(va) && std::isnan(vb)) continue;
      if (std::fabs(va - vb) <= o.atol + o.rtol * std::fabs(vb)) continue;
      if (!std::isnan(va) && !std::isnan(vb)) kd.max_abs = std::max(kd.max_abs, std::fabs(va - vb));
    }
    if (kd.differing == 0) kd.lo = first + i;
    kd.hi = first + i + 1;
    ++kd.differing;
    if (kd.first.size() < o.max_reports) kd.first.push_back({first + i, value_text(pa, t, elem), value_text(pb, t, elem)});
  }
}

void describe_values(KeyDiff& kd, uint64_t compared) {
  kd.detail = std::to_string(kd.differing) + " of " + std::to_string(compared) + " elements differ, in [" +
              std::to_string(kd.lo) + ", " + std::to_string(kd.hi) + ")";
}

}  // namespace fpg::ckpt
