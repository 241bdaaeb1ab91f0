// One DP rank of the step pipeline on its GPU (`train --device cuda`): the device backend of the
// step orchestrator (pipeline/step_orchestrator.h, which owns the phase order, the scaling
// convention, the exact grad norm, the non-finite skip and the clip decision). Params, fp32 grads,
// owned masters and optimizer state live in device memory; the collectives run on an nccl
// communicator (comm/nccl_backend.h) and every phase is a handful of launches on the rank's compute
// stream. It builds the rank from pipeline::plan_rank as RankPipeline does (the same layout,
// fragments and FP8 plans), so its state and stored bytes equal the CPU pipeline's bit for bit
// (tests/gpu/device_pipeline_test.cpp).
//
// The phases, on the compute stream:
//   1. grad_fn(params, grads) enqueues forward/backward on stream() (grads overwritten, as on the CPU)
//   2. in-place reduce-scatter per bucket
//   3. /M fused with max|g| (cuda::scale_and_max_abs, one launch); all-reduce MAX of the local max
//      through a device scalar
//   4. the fixed-point squares (one launch) -> 128-bit sums exchanged as on the CPU (all_gather_bytes)
//      -> norm; a coefficient < 1 clips the grads as the optimizer reads them (no pass of its own)
//   5. ONE fused optimizer launch over every owned fragment (adam, adamw, lion)
//   6. copy-back: per owned fragment a bf16 cast or fp32 copy; FP8 through pipeline/device/device_fp8_params.h
//      (batched amax, ONE packed all-reduce MAX, batched scales and cast; delayed update)
//   7. in-place all-gather per bucket (param buffer and columnwise twin), then params decoded to fp32
//      (bf16 -> fp32 cast; FP8 dequantized; fp32-kept params are read in place from their buffer)
// Descriptor tables (grad spans, optimizer fragments, FP8 jobs and scales) are built once here.
//
// Overlap (DeviceOverlap; bookkeeping in pipeline/device/bucket_sync.h): with grad_reduce a grad_fn stepped
// with ParamReads::hooked reports each param's last grad write (param_hooks().on_grad_ready) and a
// bucket's reduce-scatter is issued as soon as its last param is reported, so NCCL runs on the
// communication stream while the backward goes on; buckets not completed by a report are issued
// after grad_fn in bucket order (the only order without it). With param_gather the step's
// all-gathers are issued and left in flight: the next forward's param_hooks().before_read(p) makes
// the compute stream wait p's bucket and decodes p then; finish_param_sync() (called by everything
// that reads params outside a forward: params(), download_state, stored_bytes, a ParamReads::complete
// step, the destructor) waits and decodes the rest. Layer-wise matrices sync as one more bucket
// (their grad all-reduce, their uneven gathers, then the re-quantization on the first read). The
// collectives, kernels and their inputs are the same either way: results are bitwise identical with
// overlap on or off (tests/gpu/device_overlap_test.cpp).
//
// PhaseTimes: the host synchronizes the compute stream at each phase boundary (StepBackend::
// end_phase) and times the phases with a host clock (simple and exact per phase; it costs the
// overlap of consecutive phases).
//
// ParamView::bf16 (`train --compute bf16`, pipeline/device/device_network_bf16.h): the network reads
// bf16 params. bf16-stored params of the bucketed layout are read where the gather leaves them, so
// nothing decodes them, and the optimizer writes their bf16 bytes from the new masters in its own pass
// (cuda::FragmentTable's bf16 outputs), so their copy-back pass is gone too: the same bytes, fewer
// passes. fp32-kept params are cast to bf16, FP8 ones dequantized then rounded (bf16 of the fp32 a
// fp32 view decodes), layer-wise matrices decoded as in fp32 then rounded, each into a bf16 array of
// its own. The state and stored bytes equal the fp32 view's bit for bit.
//
// --dist-opt layerwise chains pipeline/device/device_layer_wise_part.h (the matrices: all-reduce, Muon or the
// elementwise optimizer on whole owned matrices, uneven gathers, batched FP8 re-quantization) with the
// bucketed part over the scalar layout, as RankPipeline does; its requantization is timed in `gather`.
// Checkpoints go through a host mirror (app/checkpoint/device_state_mirror.h) of download_state(),
// download_param() and upload() below, layer-wise matrices included.
#pragma once

#if defined(FPGATHER_HAVE_CUDA)

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "pipeline/device/bucket_sync.h"
#include "pipeline/device/param_hooks.h"
#include "kernels/stream.h"
#include "model/model_spec.h"
#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"
#include "pipeline/config.h"
#include "pipeline/param_storage.h"
#include "pipeline/rank_state.h"
#include "pipeline/step_orchestrator.h"

namespace fpg::device {

// How a step's grad_fn reads the params.
enum class ParamReads : uint8_t {
  complete,  // any grad_fn: pending gathers are finished and every param decoded before it runs
  hooked,    // grad_fn calls param_hooks() (before_read before reading a param, on_grad_ready once
             // per param after its last grad write of the step): the overlap options apply
};

struct DeviceOverlap {
  bool grad_reduce = false;   // --overlap-grad-reduce
  bool param_gather = false;  // --overlap-param-gather
};

// What the network reads the params as (the decode's target).
enum class ParamView : uint8_t {
  fp32,  // params(): every param decoded to fp32 (fp32-kept ones read in place)
  bf16,  // bf16_params(): bf16 bits, bf16-stored params read in place, copy-back fused into the optimizer
};

class DeviceRankPipeline {
 public:
  // comm: an nccl communicator (MemorySpace::device; UsageError otherwise), used from the thread that
  // has its device current; init fills host fp32 values.
  DeviceRankPipeline(const model::ModelSpec& spec, const pipeline::PipelineConfig& cfg, comm::Communicator& comm,
                     const pipeline::InitFn& init, DeviceOverlap overlap = {}, ParamView view = ParamView::fp32);
  ~DeviceRankPipeline();
  DeviceRankPipeline(const DeviceRankPipeline&) = delete;
  DeviceRankPipeline& operator=(const DeviceRankPipeline&) = delete;

  // pipeline::run_step on this rank: the semantics of pipeline::RankPipeline::step, with device
  // params and grads, grad_fn's work enqueued on stream(). Returns with the step's work complete on
  // the stream (the phase timing synchronizes it), but for the param all-gathers with param_gather.
  pipeline::StepReport step(const pipeline::GradFn& grad_fn, uint64_t micro_batches,
                            ParamReads reads = ParamReads::complete);
  // The hooks a ParamReads::hooked grad_fn calls (the same object for the pipeline's lifetime).
  const ParamHooks& param_hooks() const;
  // Device, fp32 decoded (pending gathers finished first). ParamView::fp32 only (InternalError otherwise).
  const std::vector<const float*>& params() const;
  // ParamView::bf16 only: every param as bf16 bits on the device. The pointers stay fixed for the
  // pipeline's life; their values are the last gather's once the param went through
  // param_hooks().before_read in a hooked step, in a ParamReads::complete step's grad_fn, or after
  // finish_param_sync(). A step's grad_fn gets an empty fp32 list and reads these.
  const std::vector<const uint16_t*>& bf16_params() const;
  ParamView param_view() const;
  // Make the compute stream wait every pending param all-gather and decode what is not decoded yet.
  // Logically const: the values it completes are those the last step already produced.
  void finish_param_sync() const;
  const DeviceOverlap& overlap() const;
  const BucketSync& bucket_sync() const;  // per-bucket states and the current step's event log
  cudaStream_t stream() const;                      // the rank's compute stream

  const model::ModelSpec& spec() const;
  const pipeline::PipelineConfig& config() const;
  bool is_fp8(uint32_t param) const;

  // Host copies (tests, checkpoints): the same structs/bytes RankPipeline exposes.
  pipeline::RankState download_state() const;
  std::vector<uint8_t> stored_bytes(uint32_t param) const;

  // Checkpoint staging (app/checkpoint/device_state_mirror.h). A param's stored form: pipeline::ParamStorage's
  // dtype and numel, and whether it holds rowwise `data` and (MXFP8) columnwise `col` bytes.
  struct StoredForm {
    DType dtype = DType::BF16;
    uint64_t numel = 0;
    bool data = false, col = false;
  };
  const layout::BucketedLayout& bucketed_layout() const;
  const layout::LayerWiseLayout* layer_wise_layout() const;  // null for the bucketed pipeline
  StoredForm stored_form(uint32_t param) const;
  // Copies the param's stored bytes into the host pointers of `host` (shaped as stored_form says).
  void download_param(uint32_t param, const pipeline::ParamStorage& host) const;
  // Overwrites the device state with `state` (download_state()'s form: arenas, step, FP8 scale
  // state) and every param's stored bytes with host[param], then decodes the params: the device form
  // of RankPipeline::params_loaded (no collective, no re-quantization).
  void upload(const pipeline::RankState& state, const std::vector<pipeline::ParamStorage>& host);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
