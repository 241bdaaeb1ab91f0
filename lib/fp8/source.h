// How a high-precision element is read: the three inputs of the quantizers.
//   f32          fp32 values, quantized as they are;
//   bf16         bf16 values (raw uint16 bits), quantized as they are;
//   f32_as_bf16  fp32 values rounded to bf16 (RNE) first: bf16(master) without a bf16 buffer, the
//                value TE (quantize_master_weights) and Megatron quantize for sharded fp32 masters.
// Each is a policy type with the element type T and load(T) -> float, so the loops are templates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/float_codec.h"
#include "core/hostdevice.h"
#include "fp8/format.h"
#include "fp8/recipe.h"

namespace fpg {
namespace fp8 {

struct SrcF32 {
  using T = float;
  static FPG_HD float load(float v) { return v; }
};

struct SrcBf16 {
  using T = uint16_t;
  static FPG_HD float load(uint16_t b) { return float_from_bf16(b); }
};

struct SrcF32AsBf16 {
  using T = float;
  static FPG_HD uint16_t bits(float v) { return bf16_from_float(v); }
  static FPG_HD float load(float v) { return float_from_bf16(bf16_from_float(v)); }
};

// Bytes per element of an input.
inline size_t input_size(Input in) { return in == Input::bf16 ? 2 : 4; }

template <Format F>
using FormatTag = std::integral_constant<Format, F>;

// Calls fn(SrcX{}) for the runtime input.
template <class Fn>
void dispatch_source(Input in, Fn&& fn) {
  switch (in) {
    case Input::f32: fn(SrcF32{}); break;
    case Input::bf16: fn(SrcBf16{}); break;
    case Input::f32_as_bf16: fn(SrcF32AsBf16{}); break;
  }
}

// Calls fn(FormatTag<F>{}, SrcX{}) for the runtime format and input.
template <class Fn>
void dispatch(Format f, Input in, Fn&& fn) {
  dispatch_source(in, [&](auto src) {
    if (f == Format::e4m3) fn(FormatTag<Format::e4m3>{}, src);
    else fn(FormatTag<Format::e5m2>{}, src);
  });
}

}  // namespace fp8
}  // namespace fpg
