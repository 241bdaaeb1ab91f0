// The seam between the commands and the on-disk formats. A Format recognises a path (probe) and opens
// it as a Checkpoint; a Checkpoint answers what every command asks of any checkpoint — its summary,
// one key's storage, its validation, its parameters — and offers what only some formats can do as
// capabilities. Each format implements these in its folder under formats/ and is listed in the
// registry (format_registry.h), so lib/ names no format: lib/ARCHITECTURE.md says how to add one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/checkpoint_report.h"
#include "ckpt/checkpoint_reshard.h"
#include "ckpt/param_export.h"
#include "ckpt/param_source.h"
#include "ckpt/value_diff.h"
#include "core/error.h"

namespace fpg::ckpt {

struct SummaryOptions {
  bool keys = false;  // list every stored key too
  // Every optimizer group's full buffer layout (buckets, shards): without it a checkpoint of many
  // groups (Megatron at model parallelism) gets one line per group.
  bool layouts = false;
  bool progress = false;  // a phase line while the index is read
};

struct ValidateOptions {
  bool data = false;      // re-read and decode every chunk (item, tensor)
  bool progress = false;  // a progress bar where the format has long work
};

struct ParamsOptions {
  // What the caller will do with the parameters, for refusals: "compare it", "export it".
  std::string refusing;
  // Refuse (exit 1, with the problems) a checkpoint failing the checks that need no data.
  bool validate = true;
};

// A checkpoint's per-parameter view, with whatever it keeps open.
class OpenedParams {
 public:
  virtual ~OpenedParams() = default;
  virtual const ParamSource& params() const = 0;
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;
  // The format's name, as the registry and `inspect --json` give it: "fpgather", "torch_dcp",
  // "megatron_torch_dist", "safetensors".
  virtual std::string_view format() const = 0;
  // What was opened: the checkpoint directory (after resolving `latest`), or the model file.
  virtual const std::string& path() const = 0;
  // What `inspect` shows. Nothing is validated: a damaged checkpoint is shown as it is.
  virtual CheckpointSummary summary(const SummaryOptions& options) const = 0;
  // One key's storage; UsageError for a key the checkpoint does not hold.
  virtual KeyReport key(const std::string& name) const = 0;
  // The checks of `validate`: an invalid checkpoint is a report with problems, not an error.
  virtual ValidationReport validate(const ValidateOptions& options) const = 0;
  // The checkpoint per parameter (ckpt::ParamSource), for diff and the exports.
  virtual std::unique_ptr<OpenedParams> params(const ParamsOptions& options) const = 0;

  // Capability: a comparison with `other`, a checkpoint of the same format, finer than per parameter
  // (stored key by stored key). nullopt where the format has none, or `other` is of another format:
  // the checkpoints are then compared per parameter.
  virtual std::optional<DiffReport> diff_stored(const Checkpoint& /*other*/, const DiffOptions& /*options*/,
                                                bool /*validate*/) const {
    return std::nullopt;
  }

  // Capability: the checkpoint rewritten at `target` for another layout (checkpoint_reshard.h),
  // committed atomically. UsageError where the format holds nothing to reshard or for a field it does
  // not take; fpg::Error with exit code 1 for a source that fails validation.
  virtual ReshardReport reshard(const std::string& /*target*/, const ReshardTarget& /*options*/) const {
    throw UsageError(path() + " is a " + std::string(format()) + " checkpoint: it holds no optimizer state to reshard");
  }
};

// What a format's checkpoints hold, for the commands whose operations depend on it.
enum class Contents : uint8_t {
  training_state,   // fpgather's own: a run's whole state (FP8 bytes and recipe, layout, data order)
  framework_state,  // another framework's training state (PyTorch DCP, Megatron torch_dist)
  model,            // weights only (safetensors)
};

class Format {
 public:
  virtual ~Format() = default;
  // The format's name ("fpgather", "dcp", "safetensors").
  virtual std::string_view name() const = 0;
  // What makes a path this format's, for the message when no format recognises one:
  // "index.h5 or latest (fpgather)".
  virtual std::string_view signature() const = 0;
  // The one file that is this format's, for the message on a file no format recognises: "a
  // .safetensors file or its index .json"; "" for a format of directories only.
  virtual std::string_view file_signature() const { return ""; }
  virtual Contents contents() const = 0;
  // Whether `path` is this format's: cheap (a stat or a few bytes), never throws.
  virtual bool probe(const std::string& path) const = 0;
  // Opens what probe recognised; FormatError when it cannot be read.
  virtual std::unique_ptr<Checkpoint> open(const std::string& path) const = 0;

  // Capability: `tensors` of `source` (and with options.objects its objects) written as a checkpoint
  // of this format into the directory `dir`, which it creates and commits atomically (`convert --to
  // NAME`). Returns the source bytes read. UsageError where the format writes no checkpoint, or for a
  // tensor it cannot hold.
  virtual uint64_t write_params(const ParamSource& /*source*/, const std::vector<ExportTensor>& /*tensors*/,
                                const std::string& /*dir*/, const ParamWriteOptions& /*options*/) const {
    throw UsageError("fpgather writes no " + std::string(name()) + " checkpoint");
  }
};

}  // namespace fpg::ckpt
