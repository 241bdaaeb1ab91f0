// Counts and sizes as the command line prints them (core/units.h).
#include "catch.h"
#include "core/units.h"

using namespace fpg;

TEST_CASE("units: plural and byte sizes", "[core][units]") {
  CHECK(plural(1, "file") == "1 file");
  CHECK(plural(0, "file") == "0 files");
  CHECK(plural(2, "step") == "2 steps");
  CHECK(plural(3, "index", "indexes") == "3 indexes");
  CHECK(byte_size(0) == "0 B");
  CHECK(byte_size(999) == "999 B");
  CHECK(byte_size(1000) == "1.0 kB");
  CHECK(byte_size(2432) == "2.4 kB");
  CHECK(byte_size(999'949) == "999.9 kB");
  CHECK(byte_size(1'970'000) == "1.97 MB");
  CHECK(byte_size(999'990'000) == "999.99 MB");
  CHECK(byte_size(1'000'000'000) == "1.00 GB");
  CHECK(byte_size(1'520'000'000) == "1.52 GB");
}
