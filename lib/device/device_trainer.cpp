#include "device/device_trainer.h"

#include <string>

#include "pipeline/fp8_params.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "kernels/device.h"
#include "pipeline/config.h"
#include "pipeline/fp8_params.h"
#include "train/train_setup.h"

#if defined(FPGATHER_HAVE_CUDA) && defined(FPGATHER_HAVE_NCCL)
#include <optional>
#include <vector>

#include "comm/nccl_backend.h"
#include "device/device_micro_batch.h"
#include "device/device_network.h"
#include "device/device_rank_pipeline.h"
#include "device/device_buffer.h"
#include "device/device_state_mirror.h"
#include "kernels/cuda_check.h"
#include "model/network_init.h"
#include "model/teacher_task.h"
#endif

namespace fpg::device {

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

train::TrainResult train_on_device(const train::TrainOptions& o, const DeviceRankObserver& observer,
                                   const train::StepCallback& on_step, const train::CheckpointHooks& hooks) {
  const model::ModelSpec spec = device_training_spec(o);

  const model::NetworkDims dims = *spec.network;
  const model::TeacherTask task(dims, o.seed, o.micro_batch);
  const uint64_t A = o.accumulation, N = o.dp;

  train::TrainResult result;
  result.steps.resize(o.steps);
  uint64_t first = 0;  // the resumed step (rank 0's; every rank resumes the same checkpoint)
  comm::make_nccl_group(static_cast<int>(o.dp))->run([&](comm::Communicator& comm) {
    const uint64_t rank = static_cast<uint64_t>(comm.rank());
    if (rank == 0) result.has_rank0 = true;
    const pipeline::InitFn seeded = [&](uint32_t p, float* out) {
      model::init_network_param(spec.params[p], dims, o.seed, model::NetworkRole::student, out);
    };
    DeviceRankPipeline pipe(spec, o.pipeline, comm, hooks.init ? hooks.init : seeded,
                            DeviceOverlap{o.overlap_grad_reduce, o.overlap_param_gather});
    // Checkpoints read and write the rank through its host mirror (only a checkpointed run holds one).
    std::optional<DeviceStateMirror> mirror;
    if (hooks.resume || hooks.after_step) mirror.emplace(pipe);
    const uint64_t start = hooks.resume ? hooks.resume(*mirror, comm) : 0;
    if (start > o.steps)
      throw UsageError("train: the loaded state has taken " + std::to_string(start) + " steps, more than --steps " +
                       std::to_string(o.steps) + " (the step count to reach)");
    if (rank == 0) first = start;
    if (observer) observer(start, pipe);

    DeviceNetwork net(dims, pipe.stream());
    DeviceMicroBatches batches(task, pipe.stream());
    // One float per micro-batch: this rank's, every rank's.
    const DeviceBuffer losses(A * sizeof(float), pipe.stream()), all_losses(A * N * sizeof(float), pipe.stream());
    std::vector<float> host_losses(A * N);
    const cudaStream_t comm_stream = comm::nccl_compute_stream(comm);
    for (uint64_t t = start; t < o.steps; ++t) {
      comm::WorkPtr loss_gather;
      const DeviceHookedGradFn grad_fn = [&](const std::vector<const float*>& params, const std::vector<float*>& grads,
                                             cudaStream_t stream, const ParamHooks& hooks) {
        if (stream != net.stream()) net.set_stream(stream);
        ParamHooks reads = hooks;  // grads are complete on the last micro-batch only
        reads.on_grad_ready = nullptr;
        for (uint64_t a = 0; a < A; ++a) {
          batches.draw(model::micro_batch_index(t, N, rank, A, a), net);
          net.forward_backward(params, batches.x(), batches.target(), batches.rows(), grads,
                               a == 0 ? model::GradMode::overwrite : model::GradMode::accumulate, losses.as<float>() + a,
                               a + 1 == A ? &hooks : &reads);
        }
        // The losses are all enqueued on the compute stream, which the collective waits for. Issued
        // here, before the step's param all-gathers, so that waiting it does not wait them too.
        loss_gather = comm.all_gather(losses.as<float>(), all_losses.as<float>(), A * sizeof(float));
      };
      const pipeline::StepReport rep = pipe.step(grad_fn, N * A);
      if (mirror) mirror->invalidate();
      loss_gather->wait();
      copy_to_host(host_losses.data(), all_losses.get(), A * N * sizeof(float), comm_stream);
      if (rank == 0) {
        result.steps[t] = train::step_metrics(t, host_losses, rep);
        if (on_step) on_step(result.steps[t]);
      }
      if (t + 1 == o.steps) pipe.finish_param_sync();  // the end of training: no gather left in flight
      if (observer) observer(t + 1, pipe);
      if (hooks.after_step) hooks.after_step(t + 1, *mirror, comm);
    }
  });
  train::finish_result(result, o, spec.numel(), first);
  return result;
}

#else

train::TrainResult train_on_device(const train::TrainOptions& o, const DeviceRankObserver&, const train::StepCallback&,
                                   const train::CheckpointHooks&) {
  check_device_options(o);  // throws: no CUDA in this build
  throw InternalError("train_on_device: unreachable without CUDA");
}

#endif

train::CheckpointedResult train_on_device_with_checkpoints(const train::TrainOptions& o,
                                                           const train::CheckpointOptions& ckpt,
                                                           const DeviceRankObserver& observer,
                                                           const train::StepCallback& on_step) {
  return train::run_with_checkpoints(
      o, ckpt, [&] { return device_training_spec(o); },
      [&](const train::CheckpointHooks& hooks) { return train_on_device(o, observer, on_step, hooks); });
}

}  // namespace fpg::device
