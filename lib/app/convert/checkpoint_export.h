// `fpgather convert CKPT OUT`: a training checkpoint (ckpt/state_store.h, app/checkpoint/state_save.h) exported
// as a safetensors model, streaming, in bounded memory.
//
// Tensors, per model param NAME (spec order):
//   weights bf16 (default)  NAME: the checkpoint's "weight/NAME" as held (BF16; F32 for fp32-kept
//                           params); FP8 params: BF16 rounded (RNE) from their fp32 masters.
//   weights fp32            NAME: F32, the fp32 master ("optimizer/.../master"), every param.
//   weights fp8             FP8 params: NAME = the checkpoint's own FP8 bytes ("fp8/NAME", rowwise)
//                           and NAME_scale_inv = the scale grid they were cast with, in the naming of
//                           `convert --fp8` (quantize_model.h: F32 [] tensorwise/delayed, F32 block
//                           grids, F8_E8M0 [M, K/32] mxfp8); the other params as with bf16. Nothing
//                           is re-quantized: re-encode the checkpoint with another recipe first
//                           (checkpoint_reencode.h) or quantize an export with `convert --fp8`.
//   states                  NAME.master (F32) and NAME.STATE (F32) for every optimizer state of
//                           the param (exp_avg, exp_avg_sq, momentum_buffer), mapped from either
//                           state layout through ckpt/param_state_map.h.
// __metadata__: "format": "pt", "fpgather.source" (the checkpoint directory), "fpgather.step"
// (optimizer steps), "fpgather.weights", "fpgather.states" (comma-separated, with states),
// "fpgather.producer", and with fp8 the "fpgather.fp8.*" recipe keys that `convert --dequantize` reads.
//
// OUT: a path ending in ".safetensors" is one file; one ending in ".json" is an index whose shards
// (model-0000i-of-0000n.safetensors, cut at max_shard_bytes) go in its directory; anything else is a
// directory receiving model.safetensors, or shards and model.safetensors.index.json when the
// tensors exceed max_shard_bytes. Every file is written into a staging directory beside OUT and the
// whole export put in place when complete (app/convert/staged_output.h): an existing OUT is refused
// unless `force`, and then replaced whole.
//
// Memory: two slabs of slab_bytes (one being read, one being written) plus the checkpoint reader's
// per-thread chunk buffers, whatever the checkpoint's size. The disk reads two slabs ahead into the
// page cache (StateReader::plan_reads), which the kernel may drop; it is not the process's memory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"

namespace fpg::app::convert {

enum class ExportWeights { bf16, fp32, fp8 };

struct ExportOptions {
  ExportWeights weights = ExportWeights::bf16;
  bool states = false;
  uint64_t max_shard_bytes = 5'000'000'000;  // HF's default "5GB"
  uint64_t slab_bytes = 64ull << 20;
  ThreadPool* pool = nullptr;
  bool progress = false;
  // Refuse a checkpoint that fails validation's index checks (StateStore::open). false: the
  // `--no-validate` salvage of what a broken checkpoint still holds (gaps still fail their reads).
  bool validate = true;
  bool force = false;  // replace an existing OUT
  // Paths the export reads besides the checkpoint export_checkpoint opens (for export_params: what
  // the ParamSource was opened from): OUT may never be, hold or replace one.
  std::vector<std::string> inputs;
  // Files (name, contents) written beside the tensors of a directory OUT (config.json, tokenizer
  // files), committed with them; the per-parameter export only.
  std::vector<std::pair<std::string, std::string>> side_files;
};

struct ExportSummary {
  std::string checkpoint;  // the directory read (after resolving `latest`)
  size_t tensors = 0;
  uint64_t bytes_read = 0;     // logical bytes read from the checkpoint
  uint64_t bytes_written = 0;  // tensor bytes written
  std::vector<std::string> files;  // output files, the index last when there is one
};

// Parses "5GB", "500MB", "2GiB", "1000000" (bytes). UsageError otherwise.
uint64_t parse_byte_size(const std::string& text);

// UsageError for options the checkpoint cannot serve (fp8 weights from a checkpoint without FP8
// params) or an OUT that may not be written, FormatError for an unreadable checkpoint.
ExportSummary export_checkpoint(const std::string& checkpoint, const std::string& out, const ExportOptions& opt);

}  // namespace fpg::app::convert
