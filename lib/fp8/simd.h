// Host loop drivers are compiled twice, for the build's baseline (SSE2 on x86-64) and for AVX2, and
// the loader picks one (GCC target_clones / ifunc). The loops are plain C++ either way; the AVX2
// clone is ~2x faster for the encoders (8 lanes, unsigned min, byte packing). Inline helpers the
// drivers call are forced inline so that they are compiled for the clone's target too.
//
// The hottest loops (the casts, cast_avx2.h) also have hand-written AVX2 kernels, ~2.5x faster than
// the vectorised clone; they are chosen at run time by avx2_enabled().
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__CUDACC__)
#define FPG_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FPG_CPU_CLONES
#endif

#if defined(__GNUC__) && !defined(__CUDACC__)
#define FPG_FORCE_INLINE inline __attribute__((always_inline))
#else
#define FPG_FORCE_INLINE inline
#endif

// x86-64 host build with GCC/Clang: the AVX2 intrinsic kernels exist.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define FPG_X86_SIMD 1
#else
#define FPG_X86_SIMD 0
#endif

namespace fpg {
namespace fp8 {

namespace detail {
extern bool avx2_on;
}

// Whether the AVX2 kernels run: the CPU has AVX2 (and the OS saves its registers), unless
// set_avx2_enabled(false) turned them off, which tests do to hold them to the portable loops.
inline bool avx2_enabled() { return detail::avx2_on; }
void set_avx2_enabled(bool on);

}  // namespace fp8
}  // namespace fpg
