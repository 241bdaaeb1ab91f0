#include "core/float_decode.h"

#include <cstring>

#include "core/float_codec.h"

namespace fpg {
namespace {

template <class Bits, class Decode>
void decode_each(const uint8_t* in, uint64_t n, float* out, Decode decode) {
  for (uint64_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, in + i * sizeof(Bits), sizeof(Bits));
    out[i] = decode(b);
  }
}

}  // namespace

bool decode_to_f32(DType t, const uint8_t* in, uint64_t n, float* out) {
  if (!dtype_is_decodable_float(t)) return false;
  if (n == 0) return true;
  switch (t) {
    case DType::F32: std::memcpy(out, in, n * sizeof(float)); return true;
    case DType::F64: decode_each<double>(in, n, out, [](double v) { return static_cast<float>(v); }); return true;
    case DType::BF16: decode_each<uint16_t>(in, n, out, float_from_bf16); return true;
    case DType::F16: decode_each<uint16_t>(in, n, out, float_from_fp16); return true;
    case DType::F8_E4M3: decode_each<uint8_t>(in, n, out, float_from_e4m3); return true;
    case DType::F8_E5M2: decode_each<uint8_t>(in, n, out, float_from_e5m2); return true;
    case DType::F8_E8M0: decode_each<uint8_t>(in, n, out, float_from_e8m0); return true;
    default: return false;
  }
}

}  // namespace fpg
