// A checkpoint exported, as `fpgather convert CKPT OUT` exports it: a safetensors model (one file,
// or shards and an index) or a plain PyTorch DCP directory, streaming in bounded memory, the whole
// output put in place when complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fpgather/checkpoint.h>

namespace fpgather {

struct ConvertOptions {
  // safetensors: OUT ending in ".safetensors" is one file, in ".json" an index with shards beside it,
  // anything else a directory; dcp: OUT is a DCP directory torch.distributed.checkpoint.load reads.
  std::string to = "safetensors";
  // The weights: bf16 (as held; FP8 params rounded from their masters), fp32 (the masters) or fp8
  // (an fpgather checkpoint's FP8 bytes with their scales; safetensors only).
  std::string weights = "bf16";
  bool states = false;  // also NAME.master and NAME.<state> (fp32) for every parameter
  uint64_t max_shard_bytes = 5'000'000'000;  // safetensors directories and indexes: shard above this
  // Refuse a checkpoint that fails validation's index (metadata) checks, with Error(check_failed).
  bool validate = true;
  bool force = false;  // replace an existing OUT whole
};

struct ConvertReport {
  std::string source;  // the directory read
  std::size_t tensors = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  std::vector<std::string> files;  // written, the index last where there is one
};

ConvertReport convert(const Checkpoint& source, const std::string& out, const ConvertOptions& options = {});

}  // namespace fpgather
