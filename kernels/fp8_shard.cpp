// One-fragment forms of the GPU shard API (kernels/fp8_shard.h): each runs the batched pass on a
// one-job table.
#include "kernels/fp8_shard.h"

#include <string>

#include "core/error.h"
#include "kernels/fp8_batch.h"

namespace fpg::cuda::fp8 {

void partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, float* amax, float* amax_col,
                  cudaStream_t stream) {
  const DeviceJob j = make_device_job(p, start, count, in, amax, amax_col, {}, nullptr, nullptr);
  if (count == 0) return;
  DeviceBatch({j}).partial_amax(stream);
}

void compute_scales(const Plan& p, const float* amax, const float* amax_col, float* scale, float* scale_inv,
                    uint8_t* e8m0, uint8_t* e8m0_col, cudaStream_t stream) {
  ScaleBatch({make_scale_job(p, amax, amax_col, scale, scale_inv, e8m0, e8m0_col)}).run(stream);
}

void cast_fragment(const Plan& p, const ScaleView& s, uint64_t start, uint64_t count, const void* in,
                   uint8_t* out, uint8_t* out_col, cudaStream_t stream) {
  const DeviceJob j = make_device_job(p, start, count, in, nullptr, nullptr, s, out, out_col);
  if (count == 0) return;
  DeviceBatch({j}).cast(stream);
}

}  // namespace fpg::cuda::fp8
