#include "formats/dcp/zip/crc32.h"

#include <zlib.h>

#include <algorithm>
#include <cstddef>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FPG_CRC32_CLMUL 1
#endif

namespace fpg::dcp {
namespace {

uint32_t crc32_zlib(uint32_t crc, const uint8_t* p, uint64_t size) {
  uLong c = crc;
  while (size > 0) {
    const auto n = static_cast<uInt>(std::min<uint64_t>(size, uint64_t{1} << 30));
    c = ::crc32(c, p, n);
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(c);
}

#ifdef FPG_CRC32_CLMUL
// Folding with carry-less multiplication (Gopal et al., "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ Instruction", Intel 2009), constants for the reflected CRC-32
// polynomial: four 128-bit lanes folded 64 bytes at a time (four 512-bit lanes 256 bytes at a time
// where AVX-512 has VPCLMULQDQ), then into one lane, then 16 bytes at a time, then to 64 and 32 bits
// by Barrett reduction. `len` >= 64 and a multiple of 16; `crc` is
// the inverted running value, as the algorithm works on it.
#define FPG_CLMUL __attribute__((target("pclmul,sse4.1")))

FPG_CLMUL inline __m128i load(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// x folded 128 bits forward by the constants k, plus the next 16 bytes.
FPG_CLMUL inline __m128i fold(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x11), _mm_clmulepi64_si128(x, k, 0x00)), next);
}

#define FPG_VCLMUL __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))

// The same folding four 512-bit lanes (16 128-bit ones) 256 bytes at a time: buf's whole 256-byte
// blocks (len >= 256) folded into one 128-bit value, which the 16-byte steps go on from; buf and len
// advanced past them. Four times the bytes per instruction of the 128-bit lanes where VPCLMULQDQ runs.
FPG_VCLMUL inline __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }

FPG_VCLMUL inline __m512i fold512(__m512i x, __m512i k, __m512i next) {
  // xor of the three (truth table 0x96).
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x11), _mm512_clmulepi64_epi128(x, k, 0x00), next,
                                   0x96);
}

FPG_VCLMUL __m128i fold_wide(const uint8_t*& buf, size_t& len, uint32_t crc) {
  // Each lane's constants repeated in the four lanes (loaded, not broadcast: GCC 12 warns of the
  // undefined source register of its broadcast and extract intrinsics).
  alignas(64) static const uint64_t k2048[] = {0x011542778a, 0x01322d1430, 0x011542778a, 0x01322d1430,
                                               0x011542778a, 0x01322d1430, 0x011542778a, 0x01322d1430};  // 2048 bits forward
  alignas(64) static const uint64_t k512[] = {0x0154442bd4, 0x01c6e41596, 0x0154442bd4, 0x01c6e41596,
                                              0x0154442bd4, 0x01c6e41596, 0x0154442bd4, 0x01c6e41596};  // 512 bits forward
  alignas(16) static const uint64_t k128[] = {0x01751997d0, 0x00ccaa009e};  // 128 bits forward
  __m512i x1 = _mm512_xor_si512(load512(buf), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(crc))));
  __m512i x2 = load512(buf + 64), x3 = load512(buf + 128), x4 = load512(buf + 192);
  __m512i k = _mm512_load_si512(k2048);
  buf += 256;
  len -= 256;
  for (; len >= 256; buf += 256, len -= 256) {
    x1 = fold512(x1, k, load512(buf));
    x2 = fold512(x2, k, load512(buf + 64));
    x3 = fold512(x3, k, load512(buf + 128));
    x4 = fold512(x4, k, load512(buf + 192));
  }
  k = _mm512_load_si512(k512);
  x1 = fold512(x1, k, x2);
  x1 = fold512(x1, k, x3);
  x1 = fold512(x1, k, x4);
  alignas(64) uint8_t lanes[64];
  _mm512_store_si512(lanes, x1);
  const __m128i k1 = _mm_load_si128(reinterpret_cast<const __m128i*>(k128));
  __m128i x = fold(load(lanes), k1, load(lanes + 16));
  x = fold(x, k1, load(lanes + 32));
  return fold(x, k1, load(lanes + 48));
}

bool has_vclmul() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("vpclmulqdq");
  return yes;
}

FPG_CLMUL uint32_t crc32_folded(const uint8_t* buf, size_t len, uint32_t crc) {
  alignas(16) static const uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static const uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static const uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
  alignas(16) static const uint64_t poly[] = {0x01db710641, 0x01f7011641};  // P', mu
  __m128i x1, k;
  if (len >= 256 && has_vclmul()) {
    x1 = fold_wide(buf, len, crc);
    k = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));
  } else {
    x1 = _mm_xor_si128(load(buf), _mm_cvtsi32_si128(static_cast<int>(crc)));
    __m128i x2 = load(buf + 16), x3 = load(buf + 32), x4 = load(buf + 48);
    k = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
    buf += 64;
    len -= 64;
    for (; len >= 64; buf += 64, len -= 64) {
      x1 = fold(x1, k, load(buf));
      x2 = fold(x2, k, load(buf + 16));
      x3 = fold(x3, k, load(buf + 32));
      x4 = fold(x4, k, load(buf + 48));
    }
    k = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));
    x1 = fold(x1, k, x2);
    x1 = fold(x1, k, x3);
    x1 = fold(x1, k, x4);
  }
  for (; len >= 16; buf += 16, len -= 16) x1 = fold(x1, k, load(buf));
  // 128 -> 64 bits.
  const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, k, 0x10));
  k = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k, 0x00), _mm_srli_si128(x1, 4));
  // Barrett reduction to 32 bits.
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));
  __m128i t = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k, 0x10), low32);
  x1 = _mm_xor_si128(x1, _mm_clmulepi64_si128(t, k, 0x00));
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}

bool has_clmul() {
  static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return yes;
}
#endif

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, uint64_t size) {
  auto* p = static_cast<const uint8_t*>(data);
#ifdef FPG_CRC32_CLMUL
  if (size >= 64 && has_clmul()) {
    const uint64_t bulk = size & ~uint64_t{15};
    crc = ~crc32_folded(p, static_cast<size_t>(bulk), ~crc);
    p += bulk;
    size -= bulk;
  }
#endif
  return crc32_zlib(crc, p, size);
}

uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, uint64_t size_b) {
  static_assert(sizeof(z_off_t) >= sizeof(uint64_t), "zlib's crc32_combine takes the size as z_off_t");
  return static_cast<uint32_t>(::crc32_combine(crc_a, crc_b, static_cast<z_off_t>(size_b)));
}

}  // namespace fpg::dcp
