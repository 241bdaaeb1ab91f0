#include "app/train/device_trainer.h"

#include <string>

#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "kernels/device.h"
#include "app/train/train_setup.h"

#if defined(FPGATHER_HAVE_CUDA) && defined(FPGATHER_HAVE_NCCL)
#include <memory>
#include <optional>
#include <vector>

#include "comm/nccl_backend.h"
#include "pipeline/device/device_micro_batch.h"
#include "pipeline/device/device_network.h"
#include "pipeline/device/device_network_bf16.h"
#include "pipeline/device/device_rank_pipeline.h"
#include "pipeline/device/device_buffer.h"
#include "app/checkpoint/device_state_mirror.h"
#include "model/teacher_task.h"
#endif

namespace fpg::app::train {

bool device_training_built() {
#if defined(FPGATHER_HAVE_CUDA) && defined(FPGATHER_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

void check_device_options(const train::TrainOptions& o) {
  // What --device cuda refuses everywhere first, then what this build and host lack.
  if (o.comm != "nccl")
    throw UsageError("--device cuda runs its ranks on the nccl communicator, not --comm " + o.comm);
  if (!device_training_built())
    throw UsageError("--device cuda: this fpgather is built without CUDA and NCCL (configure where the CUDA toolkit "
                     "and NCCL are found, -DFPGATHER_CUDA=AUTO or ON)");
  const int gpus = cuda::device_count();
  if (static_cast<int64_t>(o.dp) > gpus)
    throw UsageError("--device cuda: --dp " + std::to_string(o.dp) + " needs " + std::to_string(o.dp) + " GPU" +
                     (o.dp == 1 ? "" : "s") + ", this host has " + std::to_string(gpus));
}

model::ModelSpec device_training_spec(const train::TrainOptions& o) {
  check_device_options(o);
  train::TrainOptions host = o;
  host.comm = comm::launcher_rank() >= 0 ? "mpi" : "threads";
  host.overlap_grad_reduce = host.overlap_param_gather = false;  // device-only options
  return train::training_spec(host);
}

#if defined(FPGATHER_HAVE_CUDA) && defined(FPGATHER_HAVE_NCCL)

namespace {

// A rank of train_on_device: a DeviceRankPipeline on the rank's GPU, the network on cuBLAS (fp32) or
// cuBLASLt (bf16, reading the pipeline's bf16 param views), the micro-batches made on the device.
// Checkpoints read and write it through its host mirror.
class DeviceTrainingRank final : public train::TrainingRank {
 public:
  DeviceTrainingRank(const train::TrainOptions& o, const model::ModelSpec& spec, const model::TeacherTask& task,
                     comm::Communicator& comm, const pipeline::InitFn& init, const DeviceRankObserver& observer,
                     const checkpoint::CheckpointHooks& hooks)
      : o_(o), task_(task), comm_(comm), observer_(observer), hooks_(hooks),
        pipe_(spec, o.pipeline, comm, init, device::DeviceOverlap{o.overlap_grad_reduce, o.overlap_param_gather},
              o.compute == model::Compute::bf16 ? device::ParamView::bf16 : device::ParamView::fp32) {
    if (hooks_.resume || hooks_.after_step) mirror_.emplace(pipe_);  // only a checkpointed run holds one
  }

  uint64_t resume() override { return hooks_.resume ? hooks_.resume(*mirror_, comm_) : 0; }

  pipeline::StepReport step(uint64_t t, std::vector<float>& all_losses) override {
    if (!batches_) start_network();
    const uint64_t A = o_.accumulation, N = o_.dp, rank = static_cast<uint64_t>(comm_.rank());
    comm::WorkPtr loss_gather;
    const pipeline::GradFn grad_fn = [&](const std::vector<const float*>& params, const std::vector<float*>& grads) {
      const device::ParamHooks& hooks = pipe_.param_hooks();
      device::ParamHooks reads = hooks;  // grads are complete on the last micro-batch only
      reads.on_grad_ready = nullptr;
      for (uint64_t a = 0; a < A; ++a) {
        const uint64_t index = model::micro_batch_index(t, N, rank, A, a);
        // The micro-batch after this one, whose inputs are drawn on the host while this one runs.
        const uint64_t next = a + 1 < A              ? index + 1
                              : t + 1 < o_.steps ? model::micro_batch_index(t + 1, N, rank, A, 0)
                                                 : device::DeviceMicroBatches::kNoNext;
        const model::GradMode mode = a == 0 ? model::GradMode::overwrite : model::GradMode::accumulate;
        const device::ParamHooks* h = a + 1 == A ? &hooks : &reads;
        if (net16_) {  // bf16: the pipeline hands the network its bf16 views (params is empty)
          batches_->draw(index, *net16_, next);
          net16_->forward_backward(pipe_.bf16_params(), batches_->x(), batches_->target(), batches_->rows(), grads,
                                   mode, losses_.as<float>() + a, h);
        } else {
          batches_->draw(index, *net_, next);
          net_->forward_backward(params, batches_->x(), batches_->target(), batches_->rows(), grads, mode,
                                 losses_.as<float>() + a, h);
        }
      }
      // The losses are all enqueued on the compute stream, which the collective waits for. Issued
      // here, before the step's param all-gathers, so that waiting it does not wait them too.
      loss_gather = comm_.all_gather(losses_.as<float>(), all_losses_.as<float>(), A * sizeof(float));
    };
    const pipeline::StepReport rep = pipe_.step(grad_fn, N * A, device::ParamReads::hooked);
    if (mirror_) mirror_->invalidate();
    loss_gather->wait();
    device::copy_to_host(all_losses.data(), all_losses_.get(), A * N * sizeof(float), pipe_.stream());
    if (t + 1 == o_.steps) pipe_.finish_param_sync();  // the end of training: no gather left in flight
    return rep;
  }

  void observe(uint64_t steps_done) override {
    if (observer_) observer_(steps_done, pipe_);
  }

  void after_step(uint64_t steps_done) override {
    if (hooks_.after_step) hooks_.after_step(steps_done, *mirror_, comm_);
  }

 private:
  // The network, the micro-batch source and the loss slots: made at the first step, after the
  // resume and the first observation.
  void start_network() {
    const uint64_t A = o_.accumulation, N = o_.dp;
    if (o_.compute == model::Compute::bf16) net16_.emplace(task_.dims(), pipe_.stream());
    else net_.emplace(task_.dims(), pipe_.stream());
    batches_.emplace(task_, pipe_.stream(), o_.compute);
    losses_ = device::DeviceBuffer(A * sizeof(float), pipe_.stream());
    all_losses_ = device::DeviceBuffer(A * N * sizeof(float), pipe_.stream());
  }

  const train::TrainOptions& o_;
  const model::TeacherTask& task_;
  comm::Communicator& comm_;
  const DeviceRankObserver& observer_;
  const checkpoint::CheckpointHooks& hooks_;
  DeviceRankPipeline pipe_;
  std::optional<checkpoint::DeviceStateMirror> mirror_;
  std::optional<device::DeviceNetwork> net_;        // --compute fp32
  std::optional<device::DeviceNetworkBf16> net16_;  // --compute bf16
  std::optional<device::DeviceMicroBatches> batches_;
  device::DeviceBuffer losses_, all_losses_;  // one float per micro-batch: this rank's, every rank's
};

}  // namespace

train::TrainResult train_on_device(const train::TrainOptions& o, const DeviceRankObserver& observer,
                                   const train::StepCallback& on_step, const checkpoint::CheckpointHooks& hooks) {
  const model::ModelSpec spec = device_training_spec(o);
  const model::TeacherTask task(*spec.network, o.seed, o.micro_batch);
  const auto group = comm::make_nccl_group(static_cast<int>(o.dp));
  return train::run_training(
      o, spec, *group, hooks.init,
      [&](comm::Communicator& comm, const pipeline::InitFn& init) -> std::unique_ptr<train::TrainingRank> {
        return std::make_unique<DeviceTrainingRank>(o, spec, task, comm, init, observer, hooks);
      },
      on_step);
}

#else

train::TrainResult train_on_device(const train::TrainOptions& o, const DeviceRankObserver&, const train::StepCallback&,
                                   const checkpoint::CheckpointHooks&) {
  check_device_options(o);  // throws: no CUDA in this build
  throw InternalError("train_on_device: unreachable without CUDA");
}

#endif

checkpoint::CheckpointedResult train_on_device_with_checkpoints(const train::TrainOptions& o,
                                                           const checkpoint::CheckpointOptions& ckpt,
                                                           const DeviceRankObserver& observer,
                                                           const train::StepCallback& on_step) {
  return checkpoint::run_with_checkpoints(
      o, ckpt, [&] { return device_training_spec(o); },
      [&](const checkpoint::CheckpointHooks& hooks) { return train_on_device(o, observer, on_step, hooks); });
}

}  // namespace fpg::app::train
