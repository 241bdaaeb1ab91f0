// A param's values in place in a rank's buffers: what a checkpoint saves and loads.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "fp8/format.h"

namespace fpg::pipeline {

// Where a param's stored values lie on this rank (checkpoint save and load read and write them in
// place): numel elements of `dtype` — BF16 (bits), F32, or the recipe's FP8 format. FP8 params have
// rowwise `data` (null for MXFP8 columnwise-only) and MXFP8 columnwise `col` (else null), both in
// flat element order; their scales are in RankState::fp8.
struct ParamStorage {
  DType dtype = DType::BF16;
  uint8_t* data = nullptr;
  uint8_t* col = nullptr;
  uint64_t numel = 0;
};

// The checkpoint dtype of FP8 data in `f`.
inline DType fp8_dtype(fp8::Format f) { return f == fp8::Format::e4m3 ? DType::F8_E4M3 : DType::F8_E5M2; }

}  // namespace fpg::pipeline
