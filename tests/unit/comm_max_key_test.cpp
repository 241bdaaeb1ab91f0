// The integer keys the nccl backend's max runs on (comm/max_key.h): their order is the threads
// backend's max order (reduce_rank_order), and they decode to the value's bits.
#include <cmath>
#include <cstdint>
#include <vector>

#include "catch.h"
#include "comm/host_reduce.h"
#include "comm/max_key.h"
#include "core/float_codec.h"

using fpg::DType;
using namespace fpg::comm;

namespace {

std::vector<uint32_t> interesting_f32() {
  std::vector<uint32_t> v = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu,
                             0x3f800000u, 0xbf800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                             0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800123u, 0x4cbebc20u, 0xcc3ebc20u};
  for (uint32_t i = 0; i < 200; ++i) v.push_back(i * 0x9e3779b9u);
  return v;
}

// The threads backend's max of two f32 values (a from rank 0, b from rank 1).
uint32_t threads_max(uint32_t a, uint32_t b) {
  const void* src[2] = {&a, &b};
  uint32_t out = 0;
  void* dst = &out;
  reduce_rank_order(DType::F32, ReduceOp::max, src, 2, 0, 1, &dst, 1);
  return out;
}

bool is_nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

}  // namespace

TEST_CASE("max keys order values as the threads backend's max does", "[comm]") {
  const auto v = interesting_f32();
  for (uint32_t a : v)
    for (uint32_t b : v) {
      const uint32_t want = threads_max(a, b);
      const uint32_t got = f32_bits_from_max_key(std::max(max_key_from_f32_bits(a), max_key_from_f32_bits(b)));
      if (is_nan_bits(want)) {
        REQUIRE(is_nan_bits(got));
        REQUIRE((got & 0x80000000u) == 0);  // the documented difference: sign cleared
      } else {
        REQUIRE(got == want);
      }
    }
}

TEST_CASE("max keys decode to the value's bits, NaN with its sign cleared", "[comm]") {
  for (uint32_t a : interesting_f32()) {
    const uint32_t back = f32_bits_from_max_key(max_key_from_f32_bits(a));
    REQUIRE(back == (is_nan_bits(a) ? (a & 0x7fffffffu) : a));
  }
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const bool nan = (b & 0x7fffu) > 0x7f80u;
    REQUIRE(bf16_from_max_key(max_key_from_bf16(b)) == (nan ? (b & 0x7fffu) : b));
  }
}
