// A checkpoint seen in model space, whatever its format: per parameter its weight, its fp32 master and
// its optimizer states, each a whole tensor in the parameter's shape, readable by flat element range.
// fpgather's own checkpoints (formats/fpckpt), PyTorch DCP and Megatron torch_dist checkpoints in any of
// their optimizer layouts (formats/dcp) are all read through this, so `diff` and the per-parameter
// export compare and write them alike.
//
// Names follow the safetensors export of a checkpoint: NAME (the weight as held), NAME.master (the
// fp32 master) and NAME.<state> (exp_avg, exp_avg_sq, momentum_buffer …).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fpg::ckpt {

struct ParamTensor {
  std::string name;   // NAME, NAME.master or NAME.<state>
  std::string param;  // NAME
  std::string role;   // "weight", "master" or the state's name
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;

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
  // A hint that elements [lo, hi) of tensor `t` will be read soon: a source may start bringing them
  // into the page cache and return without waiting. Nothing is checked; errors are left to read().
  // May be called while a read() runs, also by a source without concurrent reads.
  virtual void will_read(size_t /*t*/, uint64_t /*lo*/, uint64_t /*hi*/) const {}
};

}  // namespace fpg::ckpt
