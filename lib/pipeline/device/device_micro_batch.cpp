#include "pipeline/device/device_micro_batch.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <vector>

#include "core/error.h"
#include "pipeline/device/device_buffer.h"
#include "kernels/cuda_check.h"

namespace fpg::device {

struct DeviceMicroBatches::Impl {
  const model::TeacherTask* task = nullptr;
  DeviceBuffer teacher;  // every teacher param, concatenated in spec order
  std::vector<const float*> teacher_ptrs;
  DeviceBuffer x, target;
  float* pinned = nullptr;        // host staging of the inputs
  cudaEvent_t copied = nullptr;   // the last H2D copy out of `pinned` has completed
  bool pending = false;
};

DeviceMicroBatches::DeviceMicroBatches(const model::TeacherTask& task, cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.task = &task;
  const auto& params = task.teacher_params();
  size_t total = 0;
  for (const auto& p : params) total += p.size();
  m.teacher = DeviceBuffer(total * sizeof(float), stream);
  float* at = m.teacher.as<float>();
  for (const auto& p : params) {
    copy_to_device(at, p.data(), p.size() * sizeof(float), stream);
    m.teacher_ptrs.push_back(at);
    at += p.size();
  }
  const uint64_t rows = uint64_t(task.micro_batch());
  m.x = DeviceBuffer(rows * task.dims().input * sizeof(float), stream);
  m.target = DeviceBuffer(rows * task.dims().output * sizeof(float), stream);
  FPG_CUDA_CHECK(cudaMallocHost(&m.pinned, rows * task.dims().input * sizeof(float)));
  FPG_CUDA_CHECK(cudaEventCreateWithFlags(&m.copied, cudaEventDisableTiming));
}

DeviceMicroBatches::~DeviceMicroBatches() {
  if (!impl_) return;
  if (impl_->copied) {
    cudaEventSynchronize(impl_->copied);  // the pinned buffer may still be read by a copy
    cudaEventDestroy(impl_->copied);
  }
  cudaFreeHost(impl_->pinned);
}

void DeviceMicroBatches::draw(uint64_t index, DeviceNetwork& net) {
  Impl& m = *impl_;
  if (net.dims() != m.task->dims()) throw UsageError("the device network was made for another network shape");
  const int64_t rows = m.task->micro_batch();
  if (m.pending) FPG_CUDA_CHECK(cudaEventSynchronize(m.copied));  // don't overwrite what is being copied
  m.task->draw_inputs(index, m.pinned);
  const size_t bytes = size_t(rows) * m.task->dims().input * sizeof(float);
  FPG_CUDA_CHECK(cudaMemcpyAsync(m.x.as<float>(), m.pinned, bytes, cudaMemcpyHostToDevice, net.stream()));
  FPG_CUDA_CHECK(cudaEventRecord(m.copied, net.stream()));
  m.pending = true;
  net.forward(m.teacher_ptrs, m.x.as<float>(), rows, m.target.as<float>());
}

int64_t DeviceMicroBatches::rows() const { return impl_->task->micro_batch(); }
const float* DeviceMicroBatches::x() const { return impl_->x.as<float>(); }
const float* DeviceMicroBatches::target() const { return impl_->target.as<float>(); }

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
