// A checkpoint's tensors in model space, whatever its format: per parameter its weight (as held), its
// fp32 master and its optimizer states, each a whole tensor in the parameter's shape, read by flat
// element range without loading the rest. The names are those of `fpgather convert --states`: NAME,
// NAME.master and NAME.<state> (exp_avg, exp_avg_sq, momentum_buffer ...). A bucketed optimizer
// layout (fpgather's, Megatron's distributed optimizer) is mapped back to parameters; padding is not
// part of any tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <fpgather/checkpoint.h>
#include <fpgather/span.h>

namespace fpgather {

struct ParamTensorInfo {
  std::string name;   // NAME, NAME.master or NAME.<state>
  std::string param;  // NAME
  std::string role;   // "weight", "master" or the state's name
  std::string dtype;  // as safetensors names it: BF16, F32, F8_E4M3, ...
  std::vector<uint64_t> shape;
  uint64_t numel = 0;
  uint64_t bytes = 0;  // of the whole tensor, as its dtype
};

struct ParamReadOptions {
  // Refuse a checkpoint that fails validation's index (metadata) checks, with Error(check_failed);
  // false reads what a broken checkpoint still holds (a gap still fails its read).
  bool validate = true;
};

class ParamReader {
 public:
  // Reads the index (metadata) of `checkpoint` and maps its optimizer state to parameters.
  // Error(format) when it cannot be read, Error(check_failed) as ParamReadOptions says.
  explicit ParamReader(const Checkpoint& checkpoint, const ParamReadOptions& options = {});
  ~ParamReader();
  ParamReader(ParamReader&&) noexcept;
  ParamReader& operator=(ParamReader&&) noexcept;

  // Parameters in registration order, each parameter's weight, master, states.
  const std::vector<ParamTensorInfo>& tensors() const;
  // Index into tensors() of `name`; Error(usage) naming the checkpoint when it holds none.
  std::size_t find(const std::string& name) const;

  // Elements [lo, hi) of tensor `t` (row-major), little-endian bytes of its dtype, into `out`, which
  // holds exactly that many bytes. Error(usage) for a range past the tensor's end or an `out` of
  // another size, Error(format) naming the file, key and range when the checkpoint cannot supply
  // them. Safe to call from several threads.
  void read(std::size_t t, uint64_t lo, uint64_t hi, Span<uint8_t> out) const;
  std::vector<uint8_t> read(std::size_t t, uint64_t lo, uint64_t hi) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fpgather
