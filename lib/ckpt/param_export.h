// What an export of a checkpoint seen per parameter (ckpt/param_source.h) writes: each output tensor
// from one source tensor, under its name, dtype and shape, and the conversion of its elements. The
// safetensors export (app/convert/param_export.h) and a format that writes checkpoints
// (Format::write_params: `convert --to dcp`) take the same plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/tensor_file.h"

namespace fpg::ckpt {

struct ExportTensor {
  size_t source = 0;  // index into ParamSource::tensors()
  TensorSpec spec;    // as written
  // Written as the source's bytes, unchanged, under a dtype of its own (ParamTensor::safetensors_dtype).
  bool as_stored = false;
  uint64_t bytes() const;
};

// Options of a format's writer of exported tensors (Format::write_params).
struct ParamWriteOptions {
  uint64_t slab_bytes = 64ull << 20;  // reads of about this size; memory is a few of them
  bool objects = false;                // the source's non-tensor objects too, as stored
  // The path the checkpoint will have once in place, where the format records one and it is written
  // elsewhere first (a staged output); empty: the directory written.
  std::string checkpoint_id;
  bool progress = false;               // a progress bar over the bytes written
};

// Converts n elements of `from` into `to` (BF16 or F32 targets from F32, BF16, F16 or F64; the same
// dtype is copied). InternalError for any other conversion.
void convert_elements(const uint8_t* src, DType from, uint8_t* dst, DType to, uint64_t n);

}  // namespace fpg::ckpt
