#include "pipeline/layer_wise_matrices.h"

#include "core/error.h"

namespace fpg::pipeline {

LayerWiseMatrices place_layer_wise_matrices(const layout::LayerWiseLayout& layout, const PipelineConfig& cfg,
                                            const std::vector<Fp8Tensor>& fp8, const std::vector<int32_t>& fp8_index) {
  const uint32_t dp = layout.dp;
  LayerWiseMatrices out;
  std::vector<LayerWiseMatrix>& mats = out.mats;
  for (const layout::OwnedMatrix& om : layout.matrices) {
    LayerWiseMatrix m;
    m.param = om.param;
    m.owner = om.owner;
    m.rows = static_cast<int64_t>(om.rows);
    m.cols = static_cast<int64_t>(om.cols);
    m.numel = om.numel();
    m.fp8 = fp8_index[om.param];
    m.grad_off = out.grad_n;
    out.grad_n += m.numel;
    if (om.dtype == DType::F32) {
      m.transport = Transport::f32;
    } else if (m.fp8 >= 0 && cfg.compact_fp8_gather) {
      const fp8::Plan& p = fp8[static_cast<size_t>(m.fp8)].from_master;
      const uint64_t compact = fp8_data_bytes(p) + 4 * (p.grid.size() + p.col_grid.size());
      m.transport = compact < 2 * m.numel ? Transport::fp8_compact : Transport::bf16;
    }
    mats.push_back(m);
  }

  out.bf16_bytes.assign(dp, 0);
  out.f32_bytes.assign(dp, 0);
  out.fp8_bytes.assign(dp, 0);
  out.amax_bytes.assign(dp, 0);
  for (uint32_t r = 0; r < dp; ++r) {
    for (LayerWiseMatrix& m : mats) {
      if (m.owner != r) continue;
      switch (m.transport) {
        case Transport::bf16:
          m.xfer_off = out.bf16_n;
          out.bf16_n += m.numel;
          out.bf16_bytes[r] += m.numel * 2;
          break;
        case Transport::f32:
          m.xfer_off = out.f32_n;
          out.f32_n += m.numel;
          out.f32_bytes[r] += m.numel * 4;
          break;
        case Transport::fp8_compact: {
          const fp8::Plan& p = fp8[static_cast<size_t>(m.fp8)].from_master;
          if (p.has_columnwise()) throw InternalError("pipeline: compact FP8 gather of columnwise data");
          m.data_off = out.fp8_n;
          out.fp8_n += m.numel;
          out.fp8_bytes[r] += m.numel;
          m.amax_xfer_off = out.amax_xfer_n;
          out.amax_xfer_n += p.grid.size();
          out.amax_bytes[r] += p.grid.size() * 4;
          break;
        }
      }
    }
  }
  for (LayerWiseMatrix& m : mats) {
    if (m.fp8 < 0 || m.transport != Transport::bf16) continue;
    m.data_off = out.fp8_n;
    out.fp8_n += m.numel;
    const fp8::Plan& p = fp8[static_cast<size_t>(m.fp8)].from_bf16;
    m.amax_off = out.amax_n;
    out.amax_n += p.grid.size() + p.col_grid.size();
  }
  return out;
}

}  // namespace fpg::pipeline
