// The layer-wise part of the device pipeline (`train --device cuda --dist-opt layerwise`): the GPU
// form of pipeline::LayerWisePart (pipeline/layer_wise_part.h: the same matrices, owners, transports,
// rank slabs and scaling conventions), chained by DeviceRankPipeline with its bucketed part for the
// scalar params as RankPipeline chains them.
//
// Per step, on the rank's compute stream:
//   grads    one in-place all-reduce SUM (rank order) of every matrix's fp32 grad; the owner scales,
//            folds max|g| and the fixed-point squares of ITS matrices into the exact grad norm
//            (kernels/grad_norm.h, one launch each) and clips them
//   update   Muon: one cuda::MuonGroup per distinct shape of the owned matrices (bf16 NS on cuBLAS,
//            momentum bitwise as the CPU, update within kernels/README.md's tolerance); adam/adamw/
//            lion: one fused launch over the owned matrices (bitwise)
//   copy-back  the owner writes bf16(master) / the fp32 master into its slab of the bf16 / fp32
//            transport buffer; compact FP8 matrices: ONE batched partial amax, ONE scale launch, ONE
//            cast launch (bytes + amax grids)
//   gather   uneven all_gather_v per transport, in place; empty ranks send 0 bytes. Each rank's slab
//            is contiguous (rank-major, registration order), so no pack/unpack is needed
//   requantize  every rank: scales of the compact matrices from the gathered grids (one launch); the
//            staged FP8 matrices re-quantized from the gathered bf16 in ONE batched pass
//   decode   params to fp32 (bf16 cast; FP8 dequantized; fp32 read in place)
// Delayed FP8 scaling (LayerWisePart's delayed branches): the matrices' DelayedStates live in device
// slots (delayed_slots.h). Copy-back: every rank loads the compact matrices' delayed scales, the
// owner casts with them folding the step's amax (ONE launch). Requantize: every rank records the
// gathered amaxes (ONE delayed_update launch); the staged matrices are cast from the gathered bf16
// with their delayed scales, folding their amax (ONE launch), which is recorded (ONE launch).
#pragma once

#if defined(FPGATHER_HAVE_CUDA)

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "kernels/grad_norm.h"
#include "kernels/stream.h"
#include "layout/layer_wise_layout.h"
#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/fp8_params.h"
#include "pipeline/optimizer_step.h"
#include "pipeline/rank_pipeline.h"
#include "pipeline/rank_state.h"

namespace fpg::device {

class DeviceLayerWisePart {
 public:
  // state: RankState::layer_wise (its fragments are set here, its arenas live on the device);
  // fp8_states: RankState::fp8 as make_fp8_tensors made it (the layer-wise tensors' initial state).
  DeviceLayerWisePart(const model::ModelSpec& spec, const layout::LayerWiseLayout& layout,
                      const pipeline::PipelineConfig& cfg, comm::Communicator& comm, pipeline::OptimizerState& state,
                      const std::vector<pipeline::Fp8Tensor>& fp8, const std::vector<int32_t>& fp8_index,
                      const std::vector<pipeline::Fp8ParamState>& fp8_states, const pipeline::InitFn& init,
                      cudaStream_t stream);
  ~DeviceLayerWisePart();
  DeviceLayerWisePart(const DeviceLayerWisePart&) = delete;
  DeviceLayerWisePart& operator=(const DeviceLayerWisePart&) = delete;

  bool holds(uint32_t param) const { return matrix_of_[param] >= 0; }
  float* grad_of(uint32_t param) const;
  // The fp32 transport keeps param in place (decode() leaves it there); null for the others.
  float* in_place(uint32_t param) const;

  void all_reduce(std::vector<comm::WorkPtr>& works);
  float scale_and_max_abs(float divisor, float acc);  // owned grads /= divisor; max(acc, |g|)
  cuda::uint128 scaled_squares(int exponent);
  void clip(float coef);
  void step_optimizer(const pipeline::Hypers& h);
  void copy_back();
  void gather(std::vector<comm::WorkPtr>& works);
  void requantize();  // after the gather completed
  void decode(uint32_t param, float* out);

  std::vector<uint8_t> stored_bytes(uint32_t param) const;
  // Fills out.layer_wise's arenas and the layer-wise FP8 tensors' entries of out.fp8.
  void download(pipeline::RankState& out) const;
  // Checkpoint staging (device_state_mirror.h), as LayerWisePart::storage: an FP8 matrix is stored as
  // its FP8 bytes (rowwise `data`, MXFP8 columnwise `col`), the others as their bf16 / fp32 transport.
  void stored_form(uint32_t param, DType& dtype, bool& data, bool& col) const;
  void download_param(uint32_t param, uint8_t* data, uint8_t* col) const;
  void upload_param(uint32_t param, const uint8_t* data, const uint8_t* col);
  // The matrices' arenas (state.layer_wise) and the layer-wise FP8 tensors' scales (state.fp8).
  void upload_state(const pipeline::RankState& state);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::vector<int32_t> matrix_of_;  // spec param -> matrix index, or -1
};

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
