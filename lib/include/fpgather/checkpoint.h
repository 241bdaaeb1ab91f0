// A checkpoint as fpgather reads it: its own (a directory holding index.h5, or a root holding
// `latest`), a PyTorch DCP directory or a Megatron-Core torch_dist directory (holding .metadata, or one
// __<rank>.metadata per rank when saved without collectives), or a
// safetensors model (a file, an index, or a directory holding one: weights only); validated and
// inspected as `fpgather validate` and `fpgather inspect` do. diff.h, reshard.h and
// convert.h take a Checkpoint too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fpgather/progress.h>

namespace fpgather {

enum class CheckpointFormat { fpgather, torch_dcp, megatron_torch_dist, safetensors };

// "fpgather", "torch_dcp", "megatron_torch_dist", "safetensors".
const char* format_name(CheckpointFormat format);

// One thing wrong with a checkpoint.
struct Problem {
  // gap, overlap, out_of_bounds, dtype, shape, checksum, missing_file, truncated_file,
  // layout_mismatch, version or index_checksum (fpgather-validate(1) says what each means)
  std::string kind;
  std::string tensor;       // the key it concerns; "" if none
  uint64_t lo = 0, hi = 0;  // the flat element range [lo, hi) it concerns
  std::string file;         // the file it concerns; "" if none
  std::string message;
  std::string text;  // the whole line, as `fpgather validate` prints it
};

struct ValidateOptions {
  // Also read every chunk (DCP: every item), verify its checksums and decode it, as
  // `fpgather validate --data`; otherwise the checks need the index (metadata) and file sizes only.
  bool data = false;
  // With data: the chunks' bytes read and checked, where the format reports it (fpgather checkpoints).
  ProgressCallback progress;
};

struct ValidationReport {
  bool valid = false;     // readable, and no problems
  bool readable = true;   // false: a format version this library cannot read (a problem says which)
  bool data_checked = false;
  bool layout_checked = false;  // the recorded (fpgather) or recovered (Megatron) layout was checked against the keys
  uint64_t tensors = 0;         // keys (fpgather) or tensor keys (DCP)
  uint64_t chunks = 0;
  uint64_t files = 0;           // fpgather: data files
  uint64_t chunks_read = 0;     // with data: chunks (DCP: items) read
  uint64_t bytes_read = 0;      // with data: stored bytes read
  std::vector<Problem> problems;  // by tensor and range
};

// One stored tensor.
struct TensorSummary {
  std::string name;
  // fpgather: weight, fp8_data, fp8_scale, master, optimizer_state or other; DCP: tensor or bytes
  std::string kind;
  std::string dtype;  // as safetensors names it ("BF16"); a DCP dtype safetensors lacks by torch's name
  std::vector<uint64_t> shape;
  uint64_t numel = 0;
  // Of the data held, uncompressed: fpgather's declared padding, never stored, is not counted; a DCP
  // bytes entry counts its stored length.
  uint64_t bytes = 0;
  uint64_t stored_bytes = 0;  // on disk, after compression
  uint64_t chunks = 0;
};

struct CheckpointSummary {
  std::string path;
  CheckpointFormat format = CheckpointFormat::fpgather;
  std::string format_version;  // fpgather: "2.0"; DCP: the metadata's version ("" when it has none)
  std::string producer;        // fpgather: the program that wrote it
  std::optional<uint64_t> step;  // optimizer steps taken, where the checkpoint records them
  // Data-parallel size of the stored optimizer layout: fpgather's as recorded; Megatron's, when its
  // distributed-optimizer layout is recovered, from where each rank's shard starts in the chunk
  // offsets (ranks holding only tail padding store nothing, so the rank files alone do not tell it).
  std::optional<uint32_t> dp;
  // Megatron: `dp` is only the smallest DP size the stored buckets allow: every bucket lies in the
  // shards of the first ranks, and larger sizes read alike.
  bool dp_is_smallest = false;
  // fpgather: what the model, layout, optimizer and FP8 recipe documents say, as inspect prints it;
  // "" when absent. DCP: optimizer is the form of the optimizer state (none, dp_reshardable or
  // model space; "" when it cannot be mapped to parameters).
  std::string model, layout, optimizer, fp8;
  uint64_t files = 0;
  uint64_t bytes = 0;         // the tensors' bytes, summed
  uint64_t stored_bytes = 0;  // the tensors' stored bytes, summed
  std::vector<TensorSummary> tensors;  // index (metadata) order
  // The format's whole summary as `fpgather inspect --json` prints it (with the options given), a
  // JSON document.
  std::string json;
};

struct InspectOptions {
  bool keys = false;     // the summary's JSON also lists every stored key (`inspect --keys`)
  bool layouts = false;  // every optimizer group's buckets and shards (`inspect --layouts`)
};

// One stored key's storage, as `fpgather inspect --key` shows it: chunks, files, padding.
struct KeyStorage {
  std::string json;               // the JSON document `inspect --key KEY --json` prints
  std::vector<std::string> text;  // the lines it prints without --json
};

class Checkpoint {
 public:
  // Finds what `path` holds and resolves `latest`. Error(format) when it is no checkpoint or its DCP
  // metadata cannot be read; each operation reads and checks what it needs.
  static Checkpoint open(const std::string& path);

  // The checkpoint directory (after resolving `latest`).
  const std::string& path() const { return path_; }
  CheckpointFormat format() const { return format_; }

  // The checks of `fpgather validate`: an invalid checkpoint is a report with problems, not an Error;
  // Error(format) when no index can be read.
  ValidationReport validate(const ValidateOptions& options = {}) const;

  // What `fpgather inspect` shows: headline facts, sizes and every tensor. Nothing is validated: an
  // altered index is shown as it is.
  CheckpointSummary inspect(const InspectOptions& options = {}) const;

  // One stored key (a name of inspect's tensors); Error(usage) for a key the checkpoint does not hold.
  KeyStorage inspect_key(const std::string& key) const;

 private:
  Checkpoint(std::string path, CheckpointFormat format) : path_(std::move(path)), format_(format) {}

  std::string path_;
  CheckpointFormat format_;
};

}  // namespace fpgather
