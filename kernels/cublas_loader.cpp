// cuBLAS and cuBLASLt, loaded on first use instead of linked.
//
// Linking libcublasLt costs every fpgather process about 0.09 s and 210 MB of resident pages at
// startup (the dynamic loader relocates its 540 MB image), although only GPU training and the Muon
// kernels call it: `inspect` of a small checkpoint spent most of its time there. So the binary does
// not link cuBLAS; this file defines the cuBLAS entry points fpgather calls, each of which resolves
// the real one with dlopen/dlsym on its first call and forwards to it. The headers' declarations
// check every signature here at compile time (a definition that differs fails to compile, or to link). A host without the libraries gets a clear error from
// the first cuBLAS call, and every other command runs there unchanged.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/shared_library.h"

namespace fpg::cuda {
namespace {

// `stem` is "libcublas" or "libcublasLt"; the soname carries the major version of the headers
// fpgather was built with, the ABI it was compiled against. Searched as the loader does, then beside
// libcudart (cuBLAS ships with it).
std::vector<std::string> cublas_names(const std::string& stem) {
  const std::string soname = stem + ".so." + std::to_string(CUBLAS_VER_MAJOR);
  return {soname, directory_of(reinterpret_cast<const void*>(&cudaGetDeviceCount)) + soname};
}

// Function-local statics: loaded once, thread-safely; a failed load throws and is retried next call.
const SharedLibrary& cublas() {
  static const SharedLibrary lib(cublas_names("libcublas"),
                                 "CUDA " + std::to_string(CUBLAS_VER_MAJOR) + "'s cuBLAS, needed on the GPU");
  return lib;
}
const SharedLibrary& cublas_lt() {
  static const SharedLibrary lib(cublas_names("libcublasLt"),
                                 "CUDA " + std::to_string(CUBLAS_VER_MAJOR) + "'s cuBLASLt, needed on the GPU");
  return lib;
}

}  // namespace
}  // namespace fpg::cuda

// Defines `name` with C linkage: the first call resolves the library's own `name`, every call forwards.
#define FPG_CUBLAS_FORWARD(library, ret, name, params, args)                                         \
  extern "C" ret CUBLASWINAPI name params {                                                           \
    using Fn = ret(CUBLASWINAPI*) params;                                                              \
    static const Fn real = ::fpg::cuda::library().function<Fn>(#name);                                   \
    return real args;                                                                                 \
  }

FPG_CUBLAS_FORWARD(cublas, cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))
FPG_CUBLAS_FORWARD(cublas, cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle))
FPG_CUBLAS_FORWARD(cublas, cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),
                   (handle, stream))
FPG_CUBLAS_FORWARD(cublas, cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode),
                   (handle, mode))
FPG_CUBLAS_FORWARD(cublas, const char*, cublasGetStatusString, (cublasStatus_t status), (status))
FPG_CUBLAS_FORWARD(cublas, cublasStatus_t, cublasGemmEx,
                   (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype,
                    int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                    cublasGemmAlgo_t algo),
                   (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                    computeType, algo))
FPG_CUBLAS_FORWARD(cublas, cublasStatus_t, cublasGemmStridedBatchedEx,
                   (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
                    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
                    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
                    cublasComputeType_t computeType, cublasGemmAlgo_t algo),
                   (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                    Ctype, ldc, strideC, batchCount, computeType, algo))

FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatmul,
                   (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                    cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                    const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                    const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
                    cudaStream_t stream),
                   (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                    workspaceSizeInBytes, stream))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
                   (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount),
                   (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount, heuristicResultsArray,
                    returnAlgoCount))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatmulDescCreate,
                   (cublasLtMatmulDesc_t * desc, cublasComputeType_t computeType, cudaDataType_t scaleType),
                   (desc, computeType, scaleType))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatmulDescSetAttribute,
                   (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                    size_t sizeInBytes),
                   (desc, attr, buf, sizeInBytes))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref),
                   (pref))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref),
                   (pref))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
                   (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                    size_t sizeInBytes),
                   (pref, attr, buf, sizeInBytes))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatrixLayoutCreate,
                   (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                   (layout, type, rows, cols, ld))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
FPG_CUBLAS_FORWARD(cublas_lt, cublasStatus_t, cublasLtMatrixLayoutSetAttribute,
                   (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                    size_t sizeInBytes),
                   (layout, attr, buf, sizeInBytes))
