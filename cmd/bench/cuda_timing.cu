#include "cmd/bench/cuda_timing.h"

#include <vector>

#include "kernels/cuda_check.h"

namespace fpg::bench {

CudaEventTimer::CudaEventTimer(cudaStream_t stream) : stream_(stream) {
  FPG_CUDA_CHECK(cudaEventCreate(&begin_));
  FPG_CUDA_CHECK(cudaEventCreate(&end_));
}

CudaEventTimer::~CudaEventTimer() {
  (void)cudaEventDestroy(begin_);
  (void)cudaEventDestroy(end_);
}

void CudaEventTimer::start() { FPG_CUDA_CHECK(cudaEventRecord(begin_, stream_)); }

double CudaEventTimer::stop_ms() {
  FPG_CUDA_CHECK(cudaEventRecord(end_, stream_));
  FPG_CUDA_CHECK(cudaEventSynchronize(end_));
  float ms = 0;
  FPG_CUDA_CHECK(cudaEventElapsedTime(&ms, begin_, end_));
  return ms;
}

Timing time_cuda_ms(const std::function<void()>& fn, int warmup, int reps, cudaStream_t stream) {
  CudaEventTimer timer(stream);
  for (int i = 0; i < warmup; ++i) fn();
  FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    timer.start();
    fn();
    ms.push_back(timer.stop_ms());
  }
  return summarize(ms);
}

}  // namespace fpg::bench
