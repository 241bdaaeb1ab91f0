// Which GPUs this process sees. Callable from CPU-only builds too (then there are none), so callers
// need no #if to ask.
#pragma once

#include <string>

namespace fpg::cuda {

// Number of usable CUDA devices; 0 without CUDA support, without a driver or without a GPU.
int device_count();

// "NVIDIA H200 (sm_90, 139.8 GiB)" for device `d`; "" where there is none.
std::string device_description(int d);

}  // namespace fpg::cuda
