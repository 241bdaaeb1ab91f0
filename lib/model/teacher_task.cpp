#include "model/teacher_task.h"

#include "core/error.h"
#include "model/network_init.h"
#include "model/philox.h"
#include "model/presets.h"

namespace fpg::model {
namespace {

constexpr uint64_t kInputDomain = 0x494E505554ull;  // "INPUT": apart from the init domains

}  // namespace

TeacherTask::TeacherTask(const NetworkDims& dims, uint64_t seed, int64_t micro_batch)
    : dims_(dims), seed_(seed), micro_batch_(micro_batch) {
  if (micro_batch <= 0) throw UsageError("micro-batch size must be positive");
  teacher_ = init_network_params(network_spec("teacher", dims), seed, NetworkRole::teacher);
  teacher_ptrs_ = const_pointers(teacher_);
}

void TeacherTask::draw_inputs(uint64_t index, float* x) const {
  const PhiloxKey key = philox_key(seed_, kInputDomain);
  const uint64_t first = index * uint64_t(micro_batch_);
  for (int64_t b = 0; b < micro_batch_; ++b)
    philox_normal_fill(key, first + uint64_t(b), dims_.input, 1.0f, x + uint64_t(b) * dims_.input);
}

void TeacherTask::draw(uint64_t index, NetworkCompute& compute, MicroBatch& out) const {
  if (compute.dims() != dims_) throw UsageError("the workspace was made for another network shape");
  out.rows = micro_batch_;
  out.x.resize(uint64_t(micro_batch_) * dims_.input);
  out.target.resize(uint64_t(micro_batch_) * dims_.output);
  draw_inputs(index, out.x.data());
  compute.forward(teacher_ptrs_, out.x.data(), micro_batch_, out.target.data());
}

}  // namespace fpg::model
