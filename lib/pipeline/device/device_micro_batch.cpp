#include "pipeline/device/device_micro_batch.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <exception>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/float_codec.h"
#include "core/thread_start.h"
#include "kernels/cuda_check.h"
#include "pipeline/device/device_buffer.h"

namespace fpg::device {

struct DeviceMicroBatches::Impl {
  const model::TeacherTask* task = nullptr;
  model::Compute compute = model::Compute::fp32;
  DeviceBuffer teacher;  // every teacher param, concatenated in spec order (fp32, or bf16 bits)
  std::vector<const float*> teacher_ptrs;       // fp32
  std::vector<const uint16_t*> teacher16_ptrs;  // bf16
  DeviceBuffer x, target;
  int device = 0;
  // Host staging of the inputs, two buffers: one is copied from while the other is filled ahead.
  float* pinned[2] = {nullptr, nullptr};
  cudaEvent_t copied[2] = {nullptr, nullptr};  // the last H2D copy out of pinned[i] has completed
  bool pending[2] = {false, false};
  int next_buf = 0;
  // The micro-batch drawn ahead (draw's `next`) on a thread of its own, into pinned[ahead_buf], and
  // what that thread threw.
  std::thread ahead;
  std::exception_ptr ahead_error;
  int ahead_buf = -1;
  uint64_t ahead_index = 0;

  // Waits the draw ahead, if any; true when it drew `index` (its buffer then holds it).
  bool take_ahead(uint64_t index, int& buf) {
    if (ahead_buf < 0) return false;
    buf = ahead_buf;
    ahead_buf = -1;
    ahead.join();
    if (ahead_error) std::rethrow_exception(std::exchange(ahead_error, nullptr));
    return ahead_index == index;
  }
  void wait_copied(int buf) {
    if (pending[buf]) FPG_CUDA_CHECK(cudaEventSynchronize(copied[buf]));
    pending[buf] = false;
  }
};

DeviceMicroBatches::DeviceMicroBatches(const model::TeacherTask& task, cudaStream_t stream, model::Compute compute)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.task = &task;
  m.compute = compute;
  const auto& params = task.teacher_params();
  size_t total = 0;
  for (const auto& p : params) total += p.size();
  if (compute == model::Compute::bf16) {
    m.teacher = DeviceBuffer(total * sizeof(uint16_t), stream);
    uint16_t* at = m.teacher.as<uint16_t>();
    std::vector<uint16_t> bits;
    for (const auto& p : params) {
      bits.resize(p.size());
      for (size_t i = 0; i < p.size(); ++i) bits[i] = bf16_from_float(p[i]);
      copy_to_device(at, bits.data(), bits.size() * sizeof(uint16_t), stream);
      m.teacher16_ptrs.push_back(at);
      at += p.size();
    }
  } else {
    m.teacher = DeviceBuffer(total * sizeof(float), stream);
    float* at = m.teacher.as<float>();
    for (const auto& p : params) {
      copy_to_device(at, p.data(), p.size() * sizeof(float), stream);
      m.teacher_ptrs.push_back(at);
      at += p.size();
    }
  }
  const uint64_t rows = uint64_t(task.micro_batch());
  m.x = DeviceBuffer(rows * task.dims().input * sizeof(float), stream);
  m.target = DeviceBuffer(rows * task.dims().output * sizeof(float), stream);
  FPG_CUDA_CHECK(cudaGetDevice(&m.device));
  for (int i = 0; i < 2; ++i) {
    FPG_CUDA_CHECK(cudaMallocHost(&m.pinned[i], rows * task.dims().input * sizeof(float)));
    FPG_CUDA_CHECK(cudaEventCreateWithFlags(&m.copied[i], cudaEventDisableTiming));
  }
}

DeviceMicroBatches::~DeviceMicroBatches() {
  if (!impl_) return;
  Impl& m = *impl_;
  if (m.ahead.joinable()) m.ahead.join();  // its thread writes a pinned buffer
  for (int i = 0; i < 2; ++i) {
    if (m.copied[i]) {
      cudaEventSynchronize(m.copied[i]);  // the pinned buffer may still be read by a copy
      cudaEventDestroy(m.copied[i]);
    }
    cudaFreeHost(m.pinned[i]);
  }
}

void DeviceMicroBatches::upload_inputs(uint64_t index, const model::NetworkDims& dims, cudaStream_t stream,
                                       uint64_t next) {
  Impl& m = *impl_;
  if (dims != m.task->dims()) throw UsageError("the device network was made for another network shape");
  const int64_t rows = m.task->micro_batch();
  int buf = m.next_buf;
  if (!m.take_ahead(index, buf)) {
    m.wait_copied(buf);  // don't overwrite what is being copied
    m.task->draw_inputs(index, m.pinned[buf]);
  }
  const size_t bytes = size_t(rows) * m.task->dims().input * sizeof(float);
  FPG_CUDA_CHECK(cudaMemcpyAsync(m.x.as<float>(), m.pinned[buf], bytes, cudaMemcpyHostToDevice, stream));
  FPG_CUDA_CHECK(cudaEventRecord(m.copied[buf], stream));
  m.pending[buf] = true;
  m.next_buf = 1 - buf;
  if (next == kNoNext) return;
  // The next micro-batch's inputs, drawn on the host while the device runs this one; where the system
  // refuses the thread (core/thread_start.h), the next draw draws its own.
  const int other = 1 - buf;
  Impl* const im = &m;
  std::optional<std::thread> t = try_start_thread([im, other, next] {
    try {
      FPG_CUDA_CHECK(cudaSetDevice(im->device));
      im->wait_copied(other);
      im->task->draw_inputs(next, im->pinned[other]);
    } catch (...) {
      im->ahead_error = std::current_exception();  // read once joined
    }
  });
  if (!t) return;
  m.ahead = std::move(*t);
  m.ahead_buf = other;
  m.ahead_index = next;
}

void DeviceMicroBatches::draw(uint64_t index, DeviceNetwork& net, uint64_t next) {
  Impl& m = *impl_;
  if (m.compute != model::Compute::fp32) throw InternalError("device micro-batches: made for bf16, drawn in fp32");
  upload_inputs(index, net.dims(), net.stream(), next);
  net.forward(m.teacher_ptrs, m.x.as<float>(), m.task->micro_batch(), m.target.as<float>());
}

void DeviceMicroBatches::draw(uint64_t index, DeviceNetworkBf16& net, uint64_t next) {
  Impl& m = *impl_;
  if (m.compute != model::Compute::bf16) throw InternalError("device micro-batches: made for fp32, drawn in bf16");
  upload_inputs(index, net.dims(), net.stream(), next);
  net.forward(m.teacher16_ptrs, m.x.as<float>(), m.task->micro_batch(), m.target.as<float>());
}

int64_t DeviceMicroBatches::rows() const { return impl_->task->micro_batch(); }
const float* DeviceMicroBatches::x() const { return impl_->x.as<float>(); }
const float* DeviceMicroBatches::target() const { return impl_->target.as<float>(); }

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
