// Where the layer-wise part keeps each whole matrix (layer_wise_part.h): its grad slot, its transport
// and its place in the rank-major slabs the uneven all-gathers move. A pure function of the layout,
// the config and the FP8 tensors, shared by the CPU part and the device one
// (pipeline/device/device_layer_wise_part.h), so both move the same bytes to the same offsets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "layout/layer_wise_layout.h"
#include "pipeline/config.h"
#include "pipeline/fp8_params.h"

namespace fpg::pipeline {

struct LayerWiseMatrix {
  uint32_t param = 0, owner = 0;
  int64_t rows = 0, cols = 0;
  uint64_t numel = 0;
  Transport transport = Transport::bf16;
  int32_t fp8 = -1;             // index into the FP8 tensors, or -1
  uint64_t grad_off = 0;        // in the grad buffer
  uint64_t xfer_off = 0;        // in the bf16 / f32 transport buffer (bf16, f32, staged FP8)
  uint64_t data_off = 0;        // FP8: in the FP8 data (and columnwise) buffer
  uint64_t amax_xfer_off = 0;   // compact: in the gathered amax buffer
  uint64_t amax_off = 0;        // staged FP8: in the rank-local amax buffer
  int32_t frag = -1;            // owner: index into the state's fragments (set by the part)
};

struct LayerWiseMatrices {
  std::vector<LayerWiseMatrix> mats;  // layout order
  // Per rank, the bytes its slab of each transport holds (all_gather_v's sizes).
  std::vector<size_t> bf16_bytes, f32_bytes, fp8_bytes, amax_bytes;
  // Elements of each buffer: grads, bf16 / f32 transport, FP8 data, gathered amaxes, local amaxes.
  uint64_t grad_n = 0, bf16_n = 0, f32_n = 0, fp8_n = 0, amax_xfer_n = 0, amax_n = 0;
};

// Transport: f32 for fp32 matrices; for FP8 ones with cfg.compact_fp8_gather the compact bytes and
// amax grids where smaller than bf16; bf16 otherwise. Slabs are rank-major, layout order inside a
// rank; staged FP8 matrices keep their bytes after the compact region and their requantize grids
// in the local amax buffer.
LayerWiseMatrices place_layer_wise_matrices(const layout::LayerWiseLayout& layout, const PipelineConfig& cfg,
                                            const std::vector<Fp8Tensor>& fp8, const std::vector<int32_t>& fp8_index);

}  // namespace fpg::pipeline
