#include "catch.h"
#include "core/dtype.h"

using namespace fpg;

TEST_CASE("dtype names round-trip and sizes", "[core][dtype]") {
  for (int i = 0; i <= static_cast<int>(DType::U64); ++i) {
    const auto t = static_cast<DType>(i);
    REQUIRE(parse_dtype(dtype_name(t)) == t);
  }
  CHECK(dtype_bytes(DType::BF16, 3) == 6);
  CHECK(dtype_bytes(DType::F8_E4M3, 5) == 5);
  CHECK(dtype_bytes(DType::F4, 3) == 2);
  CHECK(dtype_bytes(DType::F6_E2M3, 4) == 3);
  CHECK(!parse_dtype("FLOAT"));
}
