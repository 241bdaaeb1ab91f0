// FPG_HD marks functions shared by the CPU reference and the CUDA kernels, so both run the same code.
#pragma once

#if defined(__CUDACC__)
#define FPG_HD __host__ __device__ __forceinline__
#else
#define FPG_HD inline
#endif
