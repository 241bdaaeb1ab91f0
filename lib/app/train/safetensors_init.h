// `fpgather train --init FILE`: the initial fp32 values of every param from a safetensors model (a
// .safetensors file, an index or a directory holding one) instead of the seeded initializer. The
// pipeline seeds its fp32 masters with them exactly and derives the bf16/FP8 params by its regular
// copy-back, so a run started from a fp32 export of a checkpoint's masters starts from those masters
// bit for bit.
//
// Every param of the spec must be there by name with the param's shape, as F32, BF16 or F16
// (widened exactly), or as F8_E4M3/F8_E5M2 with a NAME_scale_inv or compressed-tensors' NAME_scale
// (dequantized as `convert --dequantize` does). Tensors that are not params are refused too, except those an export with
// --states adds (NAME.master, NAME.exp_avg, ...: ignored) and the scales of FP8 params.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor_file.h"
#include "model/model_spec.h"

namespace fpg::app::train {

class SafetensorsInit {
 public:
  // Opens the model and checks it against `spec` before any rank starts: UsageError naming the
  // tensor and what differs (missing, shape, dtype, not a param); FormatError for an unreadable file.
  SafetensorsInit(const std::string& path, const model::ModelSpec& spec);

  // All numel values of spec param `param` as fp32 into out. Thread-safe (ranks call it at once).
  void fill(uint32_t param, float* out) const;

  const std::string& path() const { return model_->path(); }

 private:
  std::unique_ptr<TensorFiles> model_;
  model::ModelSpec spec_;
  std::vector<const TensorFiles::Entry*> data_, scale_;  // per param; scale null unless FP8
};

}  // namespace fpg::app::train
