#include "catch.h"
#include "kernels/device.h"

TEST_CASE("a CUDA device is visible and described", "[gpu]") {
  REQUIRE(fpg::cuda::device_count() > 0);
  CHECK(!fpg::cuda::device_description(0).empty());
}
