#include "fp8/tensorwise.h"

#include "fp8/amax.h"
#include "fp8/cast_loops.h"
#include "fp8/simd.h"

namespace fpg {
namespace fp8 {
namespace {

template <class S>
FPG_CPU_CLONES float amax_impl(const typename S::T* x, uint64_t n) {
  return amax_of<S>(x, n);
}

template <Format F, class S>
FPG_CPU_CLONES void cast_impl(const typename S::T* x, uint64_t n, float scale, uint8_t* out) {
  cast_run<F, S>(x, n, scale, out);
}

FPG_CPU_CLONES void dequant_impl(const DecodeTable& t, const uint8_t* q, uint64_t n, float scale_inv,
                                 float* out) {
  dequant_run(t, q, n, scale_inv, out);
}

}  // namespace

float amax_contiguous(Input in, const void* x, uint64_t n) {
  float a = 0.0f;
  dispatch_source(in, [&](auto src) {
    using S = decltype(src);
    a = amax_impl<S>(static_cast<const typename S::T*>(x), n);
  });
  return a;
}

void cast_contiguous(Format f, Input in, const void* x, uint64_t n, float scale, uint8_t* out) {
  dispatch(f, in, [&](auto ft, auto src) {
    using S = decltype(src);
    cast_impl<decltype(ft)::value, S>(static_cast<const typename S::T*>(x), n, scale, out);
  });
}

void dequant_contiguous(Format f, const uint8_t* q, uint64_t n, float scale_inv, float* out) {
  dequant_impl(decode_table(f), q, n, scale_inv, out);
}

}  // namespace fp8
}  // namespace fpg
