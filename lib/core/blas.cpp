#include "core/blas.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/shared_library.h"

namespace fpg::blas {
namespace {

// Splits the build's ':'-separated list.
std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t at; (at = list.find(':', from)) != std::string::npos; from = at + 1) out.push_back(list.substr(from, at - from));
  out.push_back(list.substr(from));
  return out;
}

// The libraries the build found, each by its soname (searched as the loader does), else by the path
// the build found it at; loaded in the build's order.
class Libraries {
 public:
  Libraries() {
    const std::vector<std::string> sonames = split(FPGATHER_BLAS_SONAMES), paths = split(FPGATHER_BLAS_PATHS);
    for (size_t i = 0; i < sonames.size(); ++i)
      libs_.push_back(std::make_unique<SharedLibrary>(std::vector<std::string>{sonames[i], i < paths.size() ? paths[i] : ""},
                                                      "the BLAS (" + sonames[i] + "), needed by the CPU GEMMs"));
  }
  // The symbol from the first library that has it, or null.
  void* find(const char* symbol) const {
    for (const auto& l : libs_)
      if (void* p = l->find(symbol)) return p;
    return nullptr;
  }
  template <class F>
  F function(const char* symbol) const {
    if (void* p = find(symbol)) return reinterpret_cast<F>(p);
    throw Error(ExitCode::io, std::string("the BLAS (") + FPGATHER_BLAS_SONAMES + ") has no " + symbol);
  }

 private:
  std::vector<std::unique_ptr<SharedLibrary>> libs_;
};

// Loaded once, thread-safely; a failed load throws and is retried next call.
const Libraries& libraries() {
  static const Libraries libs;
  return libs;
}

}  // namespace

void sgemm(Order order, Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  static const auto real = libraries().function<decltype(&::cblas_sgemm)>("cblas_sgemm");
  real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void dgemm(Order order, Transpose ta, Transpose tb, int m, int n, int k, double alpha, const double* a, int lda,
           const double* b, int ldb, double beta, double* c, int ldc) {
  static const auto real = libraries().function<decltype(&::cblas_dgemm)>("cblas_dgemm");
  real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void use_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    using SetThreads = void (*)(int);
    if (void* p = libraries().find("openblas_set_num_threads")) reinterpret_cast<SetThreads>(p)(1);
  });
}

}  // namespace fpg::blas
