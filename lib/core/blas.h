// The CPU BLAS: the GEMMs of the built-in network and of Newton-Schulz, through the library the build
// found (OpenBLAS where there is one), loaded on first use instead of linked (core/shared_library.h
// says why).
#pragma once

#include <cblas.h>

namespace fpg::blas {

// cblas.h's enums, whichever cblas.h (OpenBLAS's or netlib's) declared them.
using Order = decltype(CblasRowMajor);
using Transpose = decltype(CblasNoTrans);

// cblas_sgemm and cblas_dgemm: C = alpha·op(A)·op(B) + beta·C.
void sgemm(Order order, Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);
void dgemm(Order order, Transpose ta, Transpose tb, int m, int n, int k, double alpha, const double* a, int lda,
           const double* b, int ldb, double beta, double* c, int ldc);

// Keeps the BLAS single-threaded, process-wide, so GEMM results never depend on how many threads the
// library splits a product over: fpgather parallelizes across data-parallel ranks (one thread each),
// and every rank's GEMMs must give the same bits whether it runs alone or beside others. Sets
// OpenBLAS to one thread, once per process (later calls do nothing); it overrides
// OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, so the result does not depend on the environment. With a
// BLAS other than OpenBLAS (no openblas_set_num_threads) it does nothing: such a library must then be
// single-threaded by its own build or configuration.
void use_single_threaded();

}  // namespace fpg::blas
