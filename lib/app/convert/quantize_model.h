// `fpgather convert IN OUT --fp8 RECIPE`: quantize the tensors of a safetensors model to FP8, and
// `--dequantize`: the reverse. Both stream tensor by tensor and slab by slab (bounded memory: a few
// megabytes per thread plus the scale tensor being built), use the thread pool, and write every output
// file under a temporary name that is renamed only when the whole model is complete.
//
// Output of a quantized tensor NAME of shape [E..., R, C] whose leading dimensions E... stack
// matrices (MoE experts; fp8/stacked.h): by default every tensor of rank >= 3, with `expert_dims`
// the tensors whose name it matches (all their dimensions but the last two). Each [R, C] matrix is
// quantized on its own:
//   NAME            F8_E4M3 or F8_E5M2, NAME's shape
//   NAME_scale_inv  tensorwise       F32 [E...]                       ([] for a matrix)
//                   blockwise        F32 [E..., ceil(R/128), ceil(C/128)]  (128x128 blocks)
//                   blockwise-1x128  F32 [E..., R, ceil(C/128)]
//                   mxfp8            F8_E8M0 [E..., R, C/32], compact, rowwise
// A tensor that stacks nothing (rank <= 2, or not matched) is one matrix [M, K] with M the product
// of its leading dimensions and K the last, and has the scales above without E....
// When OUT's config.json declares compressed-tensors (tensorwise and mxfp8 into a model directory),
// the scale is NAME_scale instead (a module's weight_scale), tensorwise F32 [E..., 1] and mxfp8 U8
// (fp8_pair.h, ScaleNaming).
// Values are quantized from the stored values as they are (F32 and BF16 directly; F16 widened to
// fp32 exactly). FP8 has no infinity and an infinite amax leaves no meaningful scale, so NaN and
// +-Inf inputs are counted per tensor (ConvertSummary::nonfinite) and, with `strict`, refused. Other tensors are copied byte for byte. __metadata__ keeps IN's entries and records
// the recipe under the keys "fpgather.fp8.*" (kMetadata* below), which --dequantize reads back.
//
// OUT is placed as app/convert/model_output.h says: never over an existing OUT without `force`; a
// model directory's other files carried over, config.json with a quantization_config
// (model_dir_files.h), which --dequantize removes again.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "fp8/recipe.h"

namespace fpg::app::convert {

constexpr const char* kMetadataRecipe = "fpgather.fp8.recipe";
constexpr const char* kMetadataFormat = "fpgather.fp8.format";
constexpr const char* kMetadataPow2 = "fpgather.fp8.pow2_scales";
constexpr const char* kMetadataMxRule = "fpgather.fp8.mx_scale";
constexpr const char* kMetadataProducer = "fpgather.producer";
constexpr const char* kScaleSuffix = "_scale_inv";

struct QuantizeModelOptions {
  fp8::Recipe recipe;                  // tensorwise, blockwise_128x128, blockwise_1x128 or mxfp8 rowwise
  std::optional<std::string> include;  // ECMAScript regex searched in names; chooses among floating
                                       // tensors of any rank (default: floating tensors of rank >= 2)
  std::optional<std::string> exclude;  // removes matching tensors from the choice
  std::optional<std::string> expert_dims;  // ECMAScript regex: the tensors that stack matrices along
                                           // all but their last two dimensions (default: rank >= 3)
  bool force = false;                  // replace an existing OUT
  ThreadPool* pool = nullptr;          // null: the global pool
  bool progress = false;
  bool strict = false;                 // a chosen tensor holding NaN or +-Inf is a FormatError, nothing written
};

struct DequantizeModelOptions {
  DType dtype = DType::BF16;           // BF16 or F32
  bool force = false;                  // replace an existing OUT
  ThreadPool* pool = nullptr;
  bool progress = false;
};

// The non-finite inputs of one quantized tensor.
struct NonFinite {
  std::string tensor;
  uint64_t nan = 0, pos_inf = 0, neg_inf = 0;
  uint64_t total() const { return nan + pos_inf + neg_inf; }
};

struct ConvertSummary {
  std::vector<NonFinite> nonfinite;  // quantized tensors holding NaN or +-Inf, in output order
  size_t quantized = 0;     // tensors quantized (or dequantized)
  size_t copied = 0;        // tensors copied unchanged
  uint64_t bytes_in = 0;    // tensor bytes read
  uint64_t bytes_out = 0;   // tensor bytes written
  std::vector<std::string> files;  // output files, index last when there is one
};

// Throws UsageError (exit 2) for a recipe a chosen tensor cannot take, naming it, or an OUT that
// may not be written, before anything is written; FormatError (exit 3) for unreadable input, a failed
// write or, with `strict`, non-finite input (naming the tensor and the counts; no output is left).
ConvertSummary quantize_model(const std::string& in, const std::string& out, const QuantizeModelOptions& opt);
ConvertSummary dequantize_model(const std::string& in, const std::string& out, const DequantizeModelOptions& opt);

}  // namespace fpg::app::convert
