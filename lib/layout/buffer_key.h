// What makes params share one contiguous buffer (Megatron-Core's BufferKey):
// the param dtype, the grad dtype and whether the layer-wise optimizer manages them. fp32-kept params
// therefore get their own fp32 buffer; FP8 params get a U8 one.
#pragma once

#include <string>

#include "core/dtype.h"

namespace fpg::layout {

struct BufferKey {
  DType param_dtype = DType::BF16;  // U8 for FP8 params, as Megatron's uint8 buffers
  DType grad_dtype = DType::F32;    // F32 with grad_reduce_in_fp32, else the param dtype
  bool layer_wise = false;          // Muon-managed (is_managed_by_layer_wise_optimizer)
};

inline bool operator==(const BufferKey& a, const BufferKey& b) {
  return a.param_dtype == b.param_dtype && a.grad_dtype == b.grad_dtype && a.layer_wise == b.layer_wise;
}
inline bool operator!=(const BufferKey& a, const BufferKey& b) { return !(a == b); }

// "(BF16, F32)" or "(BF16, F32, layer_wise)": the form checkpoint keys embed, as Megatron's
// "dtype_(torch.bfloat16, torch.float32)".
inline std::string to_string(const BufferKey& k) {
  std::string s = "(" + std::string(dtype_name(k.param_dtype)) + ", " + std::string(dtype_name(k.grad_dtype));
  if (k.layer_wise) s += ", layer_wise";
  return s + ")";
}

}  // namespace fpg::layout
