// FPG_SIMD_CLONES: compile a hot loop twice, for baseline x86-64 and for x86-64-v3 (AVX2 + FMA), and pick
// one at load time. The optimizer math calls fmaf; without hardware FMA that is a libm call per element
// and the loop cannot vectorize. Both clones round identically (fmaf is exact either way), so results
// do not depend on the machine — only the speed does. Not under clang, which does not multiversion
// function templates (clang 14: "not yet supported"): there the loops are compiled once, for baseline.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && !defined(__CUDACC__)
#define FPG_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FPG_SIMD_CLONES
#endif
