// The files of a Hugging Face model directory besides its weights (config.json,
// generation_config.json, tokenizer files, chat template, README …), which a converted model needs
// beside its new weights, and the quantization_config its config.json declares to transformers and
// vLLM.
#pragma once

#include <string>
#include <vector>

#include "core/tensor_file.h"
#include "fp8/recipe.h"

namespace fpg::app::convert {

// The files carried over from IN's directory when IN is a directory or an index (not a bare
// .safetensors file, whose directory may hold anything): the regular files directly in it (symlinks
// followed, as Hugging Face's cache holds them), except hidden files, safetensors files and indexes
// (*.index.json and the index IN names), and the weight files of other formats (.bin .pt .pth .ckpt
// .h5 .msgpack .gguf .onnx .npz), which hold the weights being replaced. Subdirectories (such as
// original/) are not carried. Sorted paths.
std::vector<std::string> companion_files(const TensorFiles& in);

// config.json's text with "quantization_config" set to the JSON object `qc`, or removed when `qc`
// is empty; the other keys keep their order. FormatError naming `path` when the text is not a JSON
// object.
std::string with_quantization_config(const std::string& text, const std::string& path, const std::string& qc);

// True for the recipes whose quantization_config is compressed-tensors' (all but the blockwise
// ones): their scales are then written under compressed-tensors' names (fp8_pair.h, ScaleNaming).
bool declares_compressed_tensors(const fp8::Recipe& r);

// The quantization_config (JSON text) of a model quantized with `r`, in the form the loaders read:
//   blockwise, blockwise-1x128  {"quant_method": "fp8", "fmt", "activation_scheme": "dynamic",
//                               "weight_block_size": [128, 128] or [1, 128]} (DeepSeek-V3; transformers'
//                               FineGrainedFP8 and vLLM's fp8 read NAME_scale_inv as written), with
//                               "modules_to_not_convert" when some are.
//   tensorwise                  compressed-tensors "float-quantized": weights strategy "tensor" (static,
//                               scale NAME_scale), activations dynamic per token (no input_scale)
//   mxfp8                       compressed-tensors "mxfp8-quantized": weights strategy "group",
//                               group_size 32, scale_dtype torch.uint8 (how compressed-tensors and vLLM
//                               tell MX from FP8 group scales), activations dynamic the same way
// (compressed-tensors has no e5m2, so every form also records "fmt"). `unquantized` names the
// modules whose weight was left in high precision ("ignore" in compressed-tensors).
std::string quantization_config(const fp8::Recipe& r, const std::vector<std::string>& unquantized);

}  // namespace fpg::app::convert
