// The teacher task's micro-batches (model/teacher_task.h) made on the GPU: inputs drawn on the host
// by TeacherTask::draw_inputs (the same Philox stream, so bitwise the CPU's) and copied to the device
// through a pinned buffer; targets from the TEACHER network's forward on the device (its params
// uploaded once), so no rank runs the teacher on the CPU. Targets equal the CPU's within the device
// network's rounding (pipeline/device/device_network.h). Under Compute::bf16 the teacher's params go
// up rounded to bf16 (the values the CPU's bf16 network reads) and its forward runs on a
// DeviceNetworkBf16 (pipeline/device/device_network_bf16.h), as the student's does.
//
// One instance per rank thread and device; draw() enqueues on the network's stream.
#pragma once

#include <cstdint>
#include <memory>

#include "model/compute_mode.h"
#include "model/teacher_task.h"
#include "pipeline/device/device_network.h"
#include "pipeline/device/device_network_bf16.h"

namespace fpg::device {

class DeviceMicroBatches {
 public:
  // Uploads the task's teacher params to the calling thread's current device, ordered on `stream`
  // (returns when done).
  DeviceMicroBatches(const model::TeacherTask& task, cudaStream_t stream,
                     model::Compute compute = model::Compute::fp32);
  ~DeviceMicroBatches();
  DeviceMicroBatches(const DeviceMicroBatches&) = delete;
  DeviceMicroBatches& operator=(const DeviceMicroBatches&) = delete;

  static constexpr uint64_t kNoNext = UINT64_MAX;

  // Micro-batch `index` into x() and target(), enqueued on net.stream() (net: this rank's network
  // of the task's dims; its scratch is reused for the teacher's forward). The previous micro-batch's
  // buffers are overwritten in stream order, so work enqueued before on that stream still sees them.
  // next: the micro-batch the caller draws after this one, whose inputs a thread of this instance
  // draws on the host meanwhile (a 1b micro-batch's inputs take about 1.5 ms of one core, which the
  // device would otherwise wait for; where the system refuses the thread, the next draw draws its
  // own); a later draw of another index draws its own. The same values.
  void draw(uint64_t index, DeviceNetwork& net, uint64_t next = kNoNext);
  // The same for Compute::bf16 (the instance must have been made for it, and the fp32 draw for fp32).
  void draw(uint64_t index, DeviceNetworkBf16& net, uint64_t next = kNoNext);

  int64_t rows() const;
  const float* x() const;       // device [rows, input]
  const float* target() const;  // device [rows, output]

 private:
  // The inputs of micro-batch `index` into x(), enqueued on `stream`.
  void upload_inputs(uint64_t index, const model::NetworkDims& dims, cudaStream_t stream, uint64_t next);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fpg::device
