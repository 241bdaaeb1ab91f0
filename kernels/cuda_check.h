// Every CUDA, cuBLAS and NCCL call is checked: a failure throws fpg::InternalError naming the call,
// the file and line, and the runtime's own message.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace fpg::cuda {

[[noreturn]] inline void throw_cuda(const char* what, const char* msg, const char* file, int line) {
  throw InternalError(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " + msg);
}

}  // namespace fpg::cuda

#define FPG_CUDA_CHECK(call)                                                        \
  do {                                                                              \
    const cudaError_t fpg_err_ = (call);                                            \
    if (fpg_err_ != cudaSuccess)                                                    \
      ::fpg::cuda::throw_cuda(#call, cudaGetErrorString(fpg_err_), __FILE__, __LINE__); \
  } while (0)

#define FPG_CUBLAS_CHECK(call)                                                       \
  do {                                                                               \
    const cublasStatus_t fpg_st_ = (call);                                           \
    if (fpg_st_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::fpg::cuda::throw_cuda(#call, cublasGetStatusString(fpg_st_), __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define FPG_CUDA_CHECK_LAUNCH() FPG_CUDA_CHECK(cudaGetLastError())
