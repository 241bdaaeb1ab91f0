#include "fp8/simd.h"

namespace fpg {
namespace fp8 {
namespace {

bool cpu_has_avx2() {
#if FPG_X86_SIMD
  // This runs from a static initializer, possibly before libgcc's own CPU-model constructor:
  // without the explicit init, __builtin_cpu_supports reads zeroed data and reports no AVX2.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

}  // namespace

bool detail::avx2_on = cpu_has_avx2();

void set_avx2_enabled(bool on) { detail::avx2_on = on && cpu_has_avx2(); }

}  // namespace fp8
}  // namespace fpg
