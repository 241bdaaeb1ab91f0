// `fpgather convert MEGATRON_CKPT OUT_DIR --to hf`: a Megatron-Core GPT checkpoint (torch_dist, any
// parallelism and optimizer form) exported as a Hugging Face model directory that transformers'
// AutoModelForCausalLM loads: model.safetensors (or shards and their index) with transformers' names
// (megatron_hf_view.h), config.json (hf_model.h), and the tokenizer and generation files of a
// tokenizer directory when one is given. Streams like every export (param_export.h): memory a few
// slabs, whatever the model's size; OUT is written in a staging directory and put in place whole.
// With fp8 the export goes first to a locked staging directory beside OUT (removed afterwards, or by
// the next conversion to OUT when a killed run left it) and is quantized from there into OUT.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/convert/checkpoint_export.h"
#include "app/convert/hf_model.h"
#include "app/convert/quantize_model.h"
#include "fp8/recipe.h"

namespace fpg::app::convert {

struct HfExportOptions {
  std::optional<HfArch> arch;  // nullopt: choose_hf_arch
  std::string config;          // a config.json template; "" for none
  std::string tokenizer;       // a directory whose tokenizer and generation files are copied; "" for none
  bool fp32 = false;           // F32 tensors (else BF16)
  bool from_masters = false;   // the fp32 masters, rounded once to the output dtype (else the weights as held)
  uint64_t max_shard_bytes = 5'000'000'000;
  // FP8: the model exported, then quantized with this recipe into OUT (quantize_model.h, scales and
  // quantization_config as `convert --fp8` writes them), the tensors fp8_exclude matches left in
  // --dtype. The default leaves the embedding, lm_head and the MoE routers.
  std::optional<fp8::Recipe> fp8;
  std::optional<std::string> fp8_include;  // the default: floating tensors of rank >= 2
  std::string fp8_exclude = R"(^model\.embed_tokens\.|^lm_head\.|\.gate\.weight$)";
  bool force = false, progress = false, validate = true;
};

struct HfExportSummary {
  ExportSummary exported;
  HfArch arch = HfArch::llama;
  std::string arch_from;  // "--arch", "the config's model_type", "the tensors"
  HfModelShape shape;
  std::vector<std::string> copied;  // files copied from the tokenizer directory
  std::optional<ConvertSummary> quantized;  // with fp8
};

// The tokenizer and generation files `export_hf` copies from a tokenizer directory, when present.
const std::vector<std::string>& hf_tokenizer_files();

// UsageError for an OUT that is not a directory, a source that is not a Megatron GPT model of the
// architecture, a config that disagrees with it (hf_model.h), a tokenizer directory holding none of
// hf_tokenizer_files(); FormatError for an unreadable checkpoint.
HfExportSummary export_hf(const std::string& in, const std::string& out, const HfExportOptions& o);

}  // namespace fpg::app::convert
