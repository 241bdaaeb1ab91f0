// torch's dtypes as pickles name them ("bfloat16", the legacy storage class "BFloat16Storage"), their
// element sizes, and the fpgather dtype each corresponds to.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace fpg::dcp {

struct TorchDType {
  std::string_view name;          // torch attribute name: "float32", "float8_e4m3fn"
  uint32_t element_bytes;         // 0 for packed sub-byte types (no whole-byte element)
  std::optional<DType> dtype;     // the fpgather dtype, where one exists
  std::string_view storage_class; // legacy typed storage ("FloatStorage"), empty if none
};

// The dtype named `name` (a torch attribute name as in "torch.bfloat16"), or nullptr.
const TorchDType* find_torch_dtype(std::string_view name);

// The dtype whose legacy typed storage class is `storage_class` ("BFloat16Storage"), or nullptr.
const TorchDType* find_torch_dtype_by_storage(std::string_view storage_class);

// The torch dtype name of an fpgather dtype ("bfloat16" for BF16); empty for dtypes torch lacks.
std::string_view torch_dtype_name(DType t);

}  // namespace fpg::dcp
