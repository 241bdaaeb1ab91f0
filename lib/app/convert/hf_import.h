// `fpgather convert HF_DIR OUT --to megatron`: a Hugging Face model directory (llama, mistral, qwen2,
// qwen3, mixtral, qwen3_moe; safetensors and config.json) imported as the model section of a
// Megatron-Core torch_dist checkpoint at a chosen TP × PP × EP: what Megatron loads with --finetune or
// --no-load-optim to train from the HF weights, and what `dist_checkpointing.load(model.
// sharded_state_dict(), OUT)` loads. The HF tensors are read through the format registry, mapped by the
// table the export uses (gpt_hf_table.h, read the other way: hf_megatron_view.h) and written by the
// format's model-section writer (ckpt/megatron_model_writer.h), streaming: memory a few blocks per
// writing thread, whatever the model's size. OUT is staged beside itself and put in place whole.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/convert/gpt_hf_table.h"
#include "app/convert/hf_model.h"
#include "ckpt/megatron_model_writer.h"
#include "core/dtype.h"

namespace fpg::app::convert {

struct HfImportOptions {
  std::optional<HfArch> arch;  // nullopt: config.json's model_type
  std::string config;          // a config.json to read instead of IN's
  MegatronLayerSpec spec = MegatronLayerSpec::te;
  uint32_t tp = 1, pp = 1, ep = 1;
  uint64_t vocab_divisible_by = 128;  // Megatron-LM's --make-vocab-size-divisible-by
  DType dtype = DType::BF16;          // BF16 or F32: every tensor written in it
  bool force = false, progress = false;
};

struct HfImportSummary {
  std::string source;           // the model read
  HfArch arch = HfArch::llama;
  std::string arch_from;        // "arch", "the config's model_type"
  HfModelShape shape;           // padded_vocab as written
  ckpt::MegatronModelWriteSummary written;
  uint64_t tensors = 0;         // Megatron parameters written
  std::vector<std::string> megatron_args;  // the Megatron-LM arguments of this model (hf_config_shape.h)
  std::vector<std::string> notes;
};

// UsageError for an IN that is no Hugging Face model directory of these architectures, a config.json
// that does not describe its tensors, tensors missing or left over, sizes the target's TP, PP or EP
// cannot split (attention heads and key/value groups, FFN sizes, layers, experts), an OUT that exists
// (without force); FormatError for what cannot be read or written.
HfImportSummary import_hf(const std::string& in, const std::string& out, const HfImportOptions& o);

}  // namespace fpg::app::convert
