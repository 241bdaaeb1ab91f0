// The libraries loaded on first use (core/shared_library.h): found, called through, and a missing
// one refused by name.
#include <string>

#include "catch.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/shared_library.h"

#if defined(FPGATHER_HAVE_NCCL)
#include <nccl.h>
#endif

using namespace fpg;

TEST_CASE("a library that is nowhere is refused with every name tried", "[shared_library]") {
  try {
    SharedLibrary lib({"libfpgather-nowhere.so.1", "/nonexistent/libfpgather-nowhere.so.1"}, "a test library");
    FAIL("loaded a library that does not exist");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::io);
    const std::string what = e.what();
    CHECK(what.find("cannot load a test library (tried libfpgather-nowhere.so.1, /nonexistent/libfpgather-nowhere.so.1)") !=
          std::string::npos);
    CHECK(what.find("LD_LIBRARY_PATH") != std::string::npos);
  }
}

TEST_CASE("a loaded library's symbols are found, and a missing one is refused by name", "[shared_library]") {
  const SharedLibrary libc({"libc.so.6"}, "the C library");
  CHECK(libc.name() == "libc.so.6");
  using Strlen = size_t (*)(const char*);
  CHECK(libc.function<Strlen>("strlen")("four") == 4);
  CHECK(libc.find("fpgather_no_such_symbol") == nullptr);
  CHECK_THROWS_WITH(libc.function<Strlen>("fpgather_no_such_symbol"),
                    "libc.so.6 has no symbol fpgather_no_such_symbol (older than the headers fpgather was built with?)");
}

TEST_CASE("the BLAS loads on first use and multiplies", "[shared_library]") {
  blas::use_single_threaded();
  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};  // row-major 2x2
  float c[] = {1, 1, 1, 1};
  blas::sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 1.0f, c, 2);
  CHECK(c[0] == 20);
  CHECK(c[1] == 23);
  CHECK(c[2] == 44);
  CHECK(c[3] == 51);
  const double x[] = {1, 2}, y[] = {3, 4};  // 1x2 times (1x2)ᵀ
  double z = 0;
  blas::dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, 1, 2, 1.0, x, 2, y, 2, 0.0, &z, 1);
  CHECK(z == 11);
}

#if defined(FPGATHER_HAVE_NCCL)
TEST_CASE("NCCL loads on first use (no GPU needed for its error strings)", "[shared_library]") {
  const std::string s = ncclGetErrorString(ncclInvalidArgument);
  CHECK(!s.empty());
}
#endif
