// Host loop drivers are compiled twice, for the build's baseline (SSE2 on x86-64) and for AVX2, and
// the loader picks one (GCC target_clones / ifunc). The loops are plain C++ either way; the AVX2
// clone is ~2x faster for the encoders (8 lanes, unsigned min, byte packing). Inline helpers the
// drivers call are forced inline so that they are compiled for the clone's target too.
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
