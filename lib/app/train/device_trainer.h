// `fpgather train --device cuda` as a library: train::run_training's loop (app/train/trainer.h) with one
// rank per GPU of an nccl group, each running a DeviceRankPipeline (pipeline/device/device_rank_pipeline.h): params,
// grads, masters and optimizer states stay on the device, the network runs on cuBLAS
// (pipeline/device/device_network.h; with TrainOptions::compute bf16 on cuBLASLt's tensor cores,
// pipeline/device/device_network_bf16.h, reading the gathered bf16 params in place) and micro-batches
// are made on the device (pipeline/device/device_micro_batch.h).
//
// Same data order, scaling convention, loss reduction, StepMetrics/TrainSummary and JSON as the CPU
// trainer, so a GPU run and a CPU run from the same seed give loss curves equal within the network's
// rounding. The step losses are all-gathered on the device (one float per micro-batch) and copied to
// the host once per step. TrainOptions::overlap_grad_reduce / overlap_param_gather become the
// pipeline's DeviceOverlap: the network reports each param's last grad write of the step's last
// micro-batch and calls before_read ahead of every param read (pipeline/device/param_hooks.h); the losses'
// all-gather is issued at the end of the backward, ahead of the param all-gathers.
//
// Checkpoints (--save/--save-every/--keep/--load/--init): app/checkpoint/checkpointing.h's hooks on each
// rank's host mirror (app/checkpoint/device_state_mirror.h), so a GPU run saves the keys and bytes a CPU run
// of the same state saves, and loads checkpoints of either.
//
// Not supported (UsageError): communicators other than nccl.
#pragma once

#include <cstdint>
#include <functional>

#include "app/checkpoint/checkpointing.h"
#include "app/train/trainer.h"

namespace fpg::device {
class DeviceRankPipeline;
}  // namespace fpg::device

namespace fpg::app::train {

using device::DeviceRankPipeline;

// train::Observer on a GPU rank (tests download params from it).
using DeviceRankObserver = train::Observer<DeviceRankPipeline>;

// Whether this build can train on GPUs (CUDA and NCCL built in).
bool device_training_built();

// Throws UsageError for options --device cuda cannot run: a build without CUDA/NCCL, comm other than
// "nccl", more DP ranks than visible GPUs.
void check_device_options(const train::TrainOptions& o);

// check_device_options, then train::training_spec's checks (through the host group of the same ranks):
// the spec a device run trains.
model::ModelSpec device_training_spec(const train::TrainOptions& o);

// o.comm must be "nccl"; o.threads_per_rank is ignored. Throws as train::train() does, and as above.
// `hooks` as train::TrainHooks: init replaces the seeded initializer, resume runs after the pipeline
// is built (the observer then first sees the resumed step), after_step after the observer.
train::TrainResult train_on_device(const train::TrainOptions& o, const DeviceRankObserver& observer = {},
                                   const train::StepCallback& on_step = {}, const checkpoint::CheckpointHooks& hooks = {});

// checkpoint::train_with_checkpoints on the GPUs: train_on_device with the checkpoint hooks.
checkpoint::CheckpointedResult train_on_device_with_checkpoints(const train::TrainOptions& o,
                                                           const checkpoint::CheckpointOptions& ckpt,
                                                           const DeviceRankObserver& observer = {},
                                                           const train::StepCallback& on_step = {});

}  // namespace fpg::app::train
