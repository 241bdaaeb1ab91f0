#include "core/blas_threads.h"

#include <mutex>

// Declared weak and without <cblas.h>: the symbol is OpenBLAS's own, and a build against another BLAS
// must still link (the pointer is then null).
extern "C" void openblas_set_num_threads(int num_threads) __attribute__((weak));

namespace fpg {

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
  });
}

}  // namespace fpg
