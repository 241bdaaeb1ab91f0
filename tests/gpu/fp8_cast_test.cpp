// The device encoders and casts against the CPU codecs (core/float_codec.h), bit for bit: fp32 ->
// bf16 (both overflow policies) and back, and the saturating FP8 encoders over a dense sample of all
// 2^32 fp32 bit patterns (every exponent, NaN payloads, subnormals, +-0, +-inf).
#include <cstdio>
#include <vector>

#include "catch.h"
#include "core/float_codec.h"
#include "fp8/recipe.h"
#include "fp8/shard.h"
#include "fp8_gpu_util.h"
#include "kernels/cast_bf16.h"
#include "kernels/fp8_shard.h"

using namespace fpg;
using namespace fpg::gpu_test;

namespace {

// Every 4099th bit pattern plus the 2^16 patterns around each special boundary.
std::vector<float> dense_sample() {
  std::vector<float> v;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) v.push_back(bits_float(static_cast<uint32_t>(u)));
  for (uint32_t center : {0x00000000u, 0x7F800000u, 0x43E00000u /*448*/, 0x47600000u /*57344*/, 0x3C800000u,
                          0x38800000u, 0x7F7F0000u})
    for (uint32_t d = 0; d < 0x8000u; ++d)
      for (uint32_t sign : {0u, 0x80000000u}) {
        v.push_back(bits_float((center + d) | sign));
        v.push_back(bits_float((center - d - 1) | sign));
      }
  return v;
}

}  // namespace

TEST_CASE("fp32 -> bf16 and bf16 -> fp32 on the GPU equal the CPU codecs", "[gpu][cast]") {
  const std::vector<float> v = dense_sample();
  for (uint64_t offset : {0, 1})
    for (uint64_t n : {uint64_t{1}, uint64_t{7}, uint64_t{1000}, static_cast<uint64_t>(v.size() - 1)})
      for (Overflow pol : {Overflow::nonsaturating, Overflow::saturate}) {
        std::vector<float> x(v.begin(), v.begin() + n);
        DevBuf<float> dx(n + offset);
        FPG_CUDA_CHECK(cudaMemcpy(dx.p + offset, x.data(), n * 4, cudaMemcpyHostToDevice));
        DevBuf<uint16_t> db(n + offset);
        fpg::cuda::cast_f32_to_bf16(dx.p + offset, n, db.p + offset, nullptr, pol);
        std::vector<uint16_t> want(n);
        for (uint64_t i = 0; i < n; ++i) want[i] = bf16_from_float(x[i], pol);
        const std::vector<uint16_t> got = db.download();
        CHECK(first_diff(want, std::vector<uint16_t>(got.begin() + offset, got.end())) < 0);

        DevBuf<float> dy(n + offset);
        fpg::cuda::cast_bf16_to_f32(db.p + offset, n, dy.p + offset, nullptr);
        std::vector<float> back(n);
        for (uint64_t i = 0; i < n; ++i) back[i] = float_from_bf16(want[i]);
        const std::vector<float> gy = dy.download();
        CHECK(same_bits(back, std::vector<float>(gy.begin() + offset, gy.end())));
      }
}

TEST_CASE("the device FP8 encoders equal e4m3/e5m2_from_float(saturate) on a dense sample", "[gpu][fp8]") {
  const std::vector<float> v = dense_sample();
  DevBuf<float> dx(v);
  DevBuf<float> one(std::vector<float>{1.0f});
  for (fp8::Format f : {fp8::Format::e4m3, fp8::Format::e5m2}) {
    const fp8::Plan p = fp8::make_plan(fp8::Recipe::tensorwise(f), fp8::Input::f32, std::vector<uint64_t>{v.size()});
    fp8::ScaleView s;
    s.scale = one.p;
    DevBuf<uint8_t> dq(v.size());
    fpg::cuda::fp8::cast_fragment(p, s, 0, v.size(), dx.p, dq.p, nullptr, nullptr);
    std::vector<uint8_t> want(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      want[i] = f == fp8::Format::e4m3 ? e4m3_from_float(v[i], Overflow::saturate) : e5m2_from_float(v[i], Overflow::saturate);
    const long d = first_diff(want, dq.download());
    if (d >= 0) std::printf("encode %s differs at 0x%08X\n", f == fp8::Format::e4m3 ? "e4m3" : "e5m2", float_bits(v[d]));
    CHECK(d < 0);
  }
}
