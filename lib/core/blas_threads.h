// Keeps the BLAS single-threaded, process-wide, so GEMM results never depend on how many threads the
// library splits a product over: fpgather parallelizes across data-parallel ranks (one thread each),
// and every rank's GEMMs must give the same bits whether it runs alone or beside others.
#pragma once

namespace fpg {

// Sets OpenBLAS to one thread, once per process (later calls do nothing). It overrides
// OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, so the result does not depend on the environment. With a
// BLAS other than OpenBLAS (no openblas_set_num_threads symbol) it does nothing: such a library must
// then be single-threaded by its own build or configuration.
void use_single_threaded_blas();

}  // namespace fpg
