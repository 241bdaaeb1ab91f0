#include "fp8/tensorwise.h"

#include "fp8/amax.h"
#include "fp8/cast_loops.h"
#include "fp8/simd.h"

namespace fpg {
namespace fp8 {
namespace {

template <typename In>
FPG_CPU_CLONES float amax_impl(const In* x, uint64_t n) {
  return amax_of(x, n);
}

template <Format F, typename In>
FPG_CPU_CLONES void cast_impl(const In* x, uint64_t n, float scale, uint8_t* out) {
  cast_run<F>(x, n, scale, out);
}

FPG_CPU_CLONES void dequant_impl(const DecodeTable& t, const uint8_t* q, uint64_t n, float scale_inv,
                                 float* out) {
  dequant_run(t, q, n, scale_inv, out);
}

}  // namespace

float amax_contiguous(Input in, const void* x, uint64_t n) {
  return in == Input::f32 ? amax_impl(static_cast<const float*>(x), n)
                          : amax_impl(static_cast<const uint16_t*>(x), n);
}

void cast_contiguous(Format f, Input in, const void* x, uint64_t n, float scale, uint8_t* out) {
  dispatch(f, in, [&](auto ft, auto it) {
    using In = typename decltype(it)::type;
    cast_impl<decltype(ft)::value>(static_cast<const In*>(x), n, scale, out);
  });
}

void dequant_contiguous(Format f, const uint8_t* q, uint64_t n, float scale_inv, float* out) {
  dequant_impl(decode_table(f), q, n, scale_inv, out);
}

}  // namespace fp8
}  // namespace fpg
