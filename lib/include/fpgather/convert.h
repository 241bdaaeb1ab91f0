// `fpgather convert IN OUT` with every option it takes, the fields named as its flags (underscores for
// dashes): what IN holds and the options given choose the conversion — a safetensors model quantized
// to FP8 or dequantized; a checkpoint exported to safetensors or PyTorch DCP, recompressed or
// re-encoded with another FP8 recipe; a Megatron checkpoint exported as a Hugging Face model
// directory, and a Hugging Face model imported as a Megatron torch_dist model section. Streaming in bounded memory; the whole output put in place when complete, never over an
// existing OUT unless `force`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fpgather/checkpoint.h>
#include <fpgather/progress.h>

namespace fpgather {

struct ConvertOptions {
  // safetensors: OUT ending in ".safetensors" is one file, in ".json" an index with shards beside it,
  // anything else a directory; dcp: OUT is a DCP directory torch.distributed.checkpoint.load reads;
  // hf: a Megatron GPT checkpoint as a Hugging Face model directory (arch, hf_config, tokenizer,
  // from_masters); megatron: a Hugging Face model as a Megatron-Core torch_dist model section (arch,
  // hf_config, tp, pp, ep, make_vocab_size_divisible_by, layer_spec).
  std::string to = "safetensors";
  // A checkpoint export: bf16 (as held; FP8 params rounded from their masters), fp32 (the masters) or
  // fp8 (an fpgather checkpoint's FP8 bytes with their scales); dequantize, to hf and to megatron: bf16
  // or fp32.
  std::string dtype = "bf16";
  bool states = false;  // a checkpoint export: also NAME.master and NAME.<state> (fp32) per parameter
  std::string max_shard_size = "5GB";  // directories and indexes: shard above this (5GB, 500MB, 2GiB)
  // Refuse a checkpoint that fails validation's index (metadata) checks, with Error(check_failed);
  // false is the command's --no-validate (messages call it no_validate).
  bool validate = true;
  bool force = false;  // replace an existing OUT whole

  // FP8. A safetensors model: quantized with recipe tensorwise, blockwise, blockwise-1x128 or mxfp8;
  // a checkpoint: its params re-encoded as `train --fp8` runs the recipe (also delayed or none), into
  // a new checkpoint; to hf: the export quantized.
  std::string fp8;
  std::string fp8_format = "e4m3";  // e4m3 or e5m2
  // Regexes (ECMAScript, searched in names; "" for not given): the floating tensors to quantize
  // (default: rank >= 2), those to leave, and those whose leading dimensions stack experts.
  std::string include, exclude, expert_dims;
  // true: tensorwise scales rounded down to powers of two; false: blockwise scales exact
  // (fp8_max/amax); unset: each recipe's default.
  std::optional<bool> pow2_scales;
  std::string mx_scale = "rceil";  // mxfp8: rceil or floor
  bool strict = false;             // refuse a tensor holding NaN or +-Inf instead of quantizing it
  int64_t amax_history = 1;                 // a checkpoint with fp8 delayed: history length
  std::string amax_algo = "most_recent";    // and algorithm, most_recent or max
  bool dequantize = false;  // FP8 tensors and their scales back to dtype

  std::string compress;  // a checkpoint rewritten with zstd[:LEVEL][+shuffle] or none

  // to hf: the architecture (auto, llama, mistral, qwen2, qwen3, mixtral, qwen3_moe), a config.json
  // template, a directory of tokenizer files to copy, the fp32 masters instead of the weights.
  std::string arch = "auto", hf_config, tokenizer;
  bool from_masters = false;

  // to megatron: the tensor-parallel, pipeline and expert-parallel sizes whose pieces are written, the
  // vocabulary padded to a multiple of make_vocab_size_divisible_by x tp, the layer spec's names (te or
  // local); hf_config: a config.json read instead of the model's.
  int64_t tp = 1, pp = 1, ep = 1;
  int64_t make_vocab_size_divisible_by = 128;
  std::string layer_spec = "te";

  ProgressCallback progress;  // the bytes converted
};

// One tensor quantized although it holds values FP8 cannot represent.
struct NonFiniteTensor {
  std::string tensor;
  uint64_t nan = 0, pos_inf = 0, neg_inf = 0;
};

struct ConvertReport {
  // What ran: quantize, dequantize, export, export_hf, import_hf, recompress or reencode_fp8.
  std::string operation;
  std::string source;  // the checkpoint or model read
  // Written: quantized, dequantized or exported tensors; recompressed keys; re-encoded FP8 params.
  std::size_t tensors = 0;
  std::size_t copied = 0;  // tensors copied unchanged (quantize, dequantize)
  uint64_t bytes_read = 0, bytes_written = 0;
  std::vector<std::string> files;  // written, the index last where there is one
  std::vector<NonFiniteTensor> nonfinite;  // quantize
  std::string json;                // the document `fpgather convert --json` prints
  std::vector<std::string> text;   // the lines `fpgather convert` prints
  std::vector<std::string> warnings;  // what it warns of on stderr (non-finite values quantized)
};

// Error(usage) for options that contradict each other or do not apply to the source (messages name
// them as the fields above), or an OUT that exists; Error(check_failed) for a source that fails
// validation; Error(format) for one that cannot be read, or with strict non-finite values.
ConvertReport convert(const std::string& source, const std::string& out, const ConvertOptions& options = {});
// The same of an opened checkpoint (its path).
ConvertReport convert(const Checkpoint& source, const std::string& out, const ConvertOptions& options = {});

}  // namespace fpgather
