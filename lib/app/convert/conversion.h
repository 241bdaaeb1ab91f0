// `fpgather convert IN OUT` as one request, whatever it turns out to do: what IN holds and the options
// given choose the conversion — quantize a safetensors model to FP8 or dequantize it
// (quantize_model.h); export a checkpoint to safetensors or DCP (export_any.h), recompress it
// (checkpoint_recompress.h) or re-encode its FP8 params (fp8_reencode.h); export a Megatron checkpoint
// as a Hugging Face model directory (hf_export.h), or import one into Megatron (hf_import.h). The options are checked against each other and
// against IN before anything is read or written. The command line and the public API both run this,
// so they take the same options, refuse the same combinations with the same messages and report the
// same summary.
//
// Messages name options through an OptionNamer: the library's names the fields of
// ConversionOptions ("fp8", "to='hf'"); the command line passes one that names its flags.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/convert/quantize_model.h"

namespace fpg::app::convert {

// Each field is named as the option it stands for; "" (or false) where it is not given.
struct ConversionOptions {
  std::string to = "safetensors";  // safetensors, dcp, hf or megatron
  // A safetensors model: tensorwise, blockwise, blockwise-1x128 or mxfp8; a checkpoint: its params
  // re-encoded as a run with this recipe (also delayed or none) would hold them.
  std::string fp8;
  bool dequantize = false;
  std::string fp8_format = "e4m3";
  std::string include, exclude, expert_dims;  // ECMAScript regexes
  bool pow2_scales = false, no_pow2_scales = false;
  bool strict = false;
  std::string mx_scale = "rceil";
  // --dequantize: bf16 or fp32; a checkpoint export: bf16, fp32 or fp8; to hf or megatron: bf16 or fp32.
  std::string dtype = "bf16";
  bool states = false;
  std::string max_shard_size = "5GB";
  std::string compress;  // zstd[:LEVEL][+shuffle] or none
  int64_t amax_history = 1;
  std::string amax_algo = "most_recent";
  bool no_validate = false;
  std::string arch = "auto", hf_config, tokenizer;
  bool from_masters = false;
  // to megatron: the target's parallel sizes, its vocabulary padding and the layer spec whose names it takes.
  int64_t tp = 1, pp = 1, ep = 1;
  int64_t make_vocab_size_divisible_by = 128;
  std::string layer_spec = "te";
  bool force = false;
  bool progress = false;  // the terminal's progress line (core/progress.h)
};

// How a message names option `field` (a member of ConversionOptions), alone (`value` "") or given
// `value`.
using OptionNamer = std::function<std::string(const std::string& field, const std::string& value)>;
// The library's: "fp8", "to='hf'".
std::string field_option_name(const std::string& field, const std::string& value);

struct ConversionResult {
  // What ran: quantize, dequantize, export, export_hf, import_hf, recompress or reencode_fp8 (the JSON's
  // "operation": "quantized" and "dequantized" for the first two).
  std::string operation;
  std::string source;  // the checkpoint or model read
  uint64_t tensors = 0;  // written: quantized, dequantized or exported tensors; recompressed keys
  uint64_t copied = 0;   // tensors copied unchanged
  uint64_t bytes_read = 0, bytes_written = 0;
  std::vector<std::string> files;  // written, an index last
  std::vector<NonFinite> nonfinite;  // quantize: the tensors holding NaN or +-Inf
  nlohmann::json document;         // what `convert --json` prints
  std::vector<std::string> text;   // the lines `convert` prints on stdout without --json
  std::vector<std::string> warnings;  // lines for stderr: non-finite values quantized
};

// Throws UsageError (exit 2) naming options through `name` for options that contradict each other
// or do not apply to IN, before anything is written; then the errors of the conversion chosen.
ConversionResult convert_any(const std::string& in, const std::string& out, const ConversionOptions& options,
                             const OptionNamer& name = field_option_name);

}  // namespace fpg::app::convert
