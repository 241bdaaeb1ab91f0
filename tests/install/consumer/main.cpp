// Quantizes a few values with the installed library and prints the FP8 codes.
#include <cstdio>
#include <vector>

#include "core/float_codec.h"
#include "fp8/quantize.h"

int main() {
  const std::vector<float> x = {1.3f, -0.5f, 2.0f, 0.0f};
  const auto q = fpg::fp8::quantize_tensor(fpg::fp8::Recipe::tensorwise(), fpg::fp8::Input::f32, {4}, x.data());
  for (uint8_t b : q.data) std::printf("%02x ", b);
  std::printf("%02x\n", fpg::e4m3_from_float(448.0f));
  return 0;
}
