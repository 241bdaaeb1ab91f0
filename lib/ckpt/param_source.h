// A checkpoint seen in model space, whatever its format: per parameter its weight, its fp32 master and
// its optimizer states, each a whole tensor in the parameter's shape, readable by flat element range.
// fpgather's own checkpoints (formats/fpckpt), PyTorch DCP and Megatron torch_dist checkpoints in any of
// their optimizer layouts (formats/dcp) are all read through this, so `diff` and the per-parameter
// export compare and write them alike.
//
// Names follow the safetensors export of a checkpoint: NAME (the weight as held), NAME.master (the
// fp32 master) and NAME.<state> (exp_avg, exp_avg_sq, momentum_buffer …). State that belongs to no
// parameter (an optimizer's 0-d step, a training loop's counters) keeps its stored key as its name,
// role "other"; non-tensor state (a DCP's bytes entries: param_groups, a dataloader's state) is
// offered as objects, compared by their decoded content.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fpg::ckpt {

// Elements [lo, hi) of tensor `tensor` of a ParamSource.
struct ParamRange {
  size_t tensor = 0;
  uint64_t lo = 0, hi = 0;
};

struct ParamTensor {
  std::string name;   // NAME, NAME.master or NAME.<state>
  std::string param;  // NAME
  std::string role;   // "weight", "master", the state's name, or "other" (state of no parameter)
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;
  // Why the tensor cannot be exported, where it cannot: a stored dtype fpgather has no counterpart
  // of is offered as its bytes (dtype U8, the element's bytes as a last dimension), which compare
  // exactly but are not that dtype's values. Empty: exportable.
  std::string unexportable;
  // Where such a tensor's bytes are still a safetensors dtype: a safetensors export writes them
  // unchanged as that dtype and shape (torch's packed float4_e2m1fn_x2 pairs as F4, whose shape
  // counts the 4-bit elements: the last dimension twice torch's). Unset: refused as `unexportable`.
  std::optional<DType> safetensors_dtype = std::nullopt;
  std::vector<uint64_t> safetensors_shape = {};

  uint64_t numel() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
  }
};

class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // What was opened, for messages: "Megatron torch_dist (dp_reshardable) DIR".
  virtual std::string describe() const = 0;
  // Every tensor, parameters in registration order, each parameter's weight, master, states.
  virtual const std::vector<ParamTensor>& tensors() const = 0;
  // Elements [lo, hi) of tensor `t` (row-major) into `out`, as its dtype. FormatError naming the
  // file, key and range when the checkpoint cannot supply them.
  virtual void read(size_t t, uint64_t lo, uint64_t hi, void* out) const = 0;
  // Whether read() may be called from several threads at once: a streaming reader then keeps more
  // than one read in flight.
  virtual bool concurrent_reads() const { return false; }
  // A hint: the reads that follow, in this order (one at a time, or a few at once where
  // concurrent_reads allows, started in this order). A source may read ahead along them,
  // up to `window` bytes past the read in progress, so that the disk is busy between reads. A read
  // that is not one of the next few planned is served as usual (planned reads skipped over are taken
  // as done). Nothing is checked and nothing thrown; errors are left to read(). A new plan replaces
  // the last.
  virtual void plan_reads(std::vector<ParamRange> /*reads*/, uint64_t /*window*/) const {}
  // Called once every read is done (before the output is committed): the checks that need all of
  // them, such as the checksum of a stored item read in parts. FormatError naming the item.
  virtual void finish_reads() const {}

  // Non-tensor state by name (its stored key), and each one's decoded content as text, for a
  // comparison by content. FormatError naming the file and key when it cannot be decoded.
  virtual const std::vector<std::string>& objects() const {
    static const std::vector<std::string> none;
    return none;
  }
  virtual std::string object_text(size_t /*object*/) const { return {}; }
  // The object's stored bytes, as the checkpoint holds them (a torch.save archive for a DCP), for an
  // export into the same kind of checkpoint.
  virtual std::vector<uint8_t> object_bytes(size_t /*object*/) const { return {}; }
};

}  // namespace fpg::ckpt
