// cudaStream_t without the CUDA headers, so that kernels/ headers compile in plain C++ TUs.
#pragma once

#if defined(FPGATHER_HAVE_CUDA) || defined(__CUDACC__)
#include <cuda_runtime_api.h>
#else
struct CUstream_st;
using cudaStream_t = CUstream_st*;
#endif
