// kernels/device.h for builds without CUDA: no devices. With CUDA, kernels/device.cpp defines them.
#if !defined(FPGATHER_HAVE_CUDA)
#include "kernels/device.h"

namespace fpg::cuda {
int device_count() { return 0; }
std::string device_description(int) { return ""; }
}  // namespace fpg::cuda
#endif
