// GPU work timed with CUDA events, for the GPU benchmarks of `fpgather bench`: the events measure
// the device's time between two points of a stream, not the host's launch overhead. Built with CUDA
// only (cuda_timing.cu); include it under FPGATHER_HAVE_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "cmd/bench/timing.h"

namespace fpg::bench {

// A pair of CUDA events around work enqueued on one stream.
class CudaEventTimer {
 public:
  explicit CudaEventTimer(cudaStream_t stream = nullptr);
  ~CudaEventTimer();
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;

  void start();      // records the first event
  double stop_ms();  // records the second, waits for it; milliseconds between the two

 private:
  cudaStream_t stream_;
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

// Runs fn `warmup` times and waits for the stream, then `reps` times (at least one) each between
// the two events of a CudaEventTimer on `stream`; the repetitions' milliseconds, summarized.
Timing time_cuda_ms(const std::function<void()>& fn, int warmup, int reps, cudaStream_t stream = nullptr);

}  // namespace fpg::bench
