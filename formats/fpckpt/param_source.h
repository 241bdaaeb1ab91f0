// An fpgather checkpoint as a ckpt::ParamSource: per parameter of its model spec, the weight as held
// ("weight/NAME"; FP8 parameters, stored as FP8 bytes and scales, have none here), the fp32 master and
// the optimizer states, wherever the state layout (bucket or model) puts them (ckpt/param_state_map.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/param_source.h"
#include "ckpt/param_state_map.h"
#include "formats/fpckpt/read_ahead.h"
#include "formats/fpckpt/reader.h"

namespace fpg::fpckpt {

class CheckpointParams : public ckpt::ParamSource {
 public:
  // FormatError when the index's documents do not describe the parameters (ParamStateMap).
  CheckpointParams(const CheckpointReader& reader, ThreadPool* pool = nullptr);

  std::string describe() const override;
  const std::vector<ckpt::ParamTensor>& tensors() const override { return tensors_; }
  void read(size_t t, uint64_t lo, uint64_t hi, void* out) const override;
  // A ReadAhead over the plan's key ranges, advanced as the planned reads arrive.
  void plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t window) const override;

 private:
  struct Source {
    long weight_key = -1;  // a "weight/NAME" key, or -1 for master and states
    uint32_t param = 0;
    std::string state;
  };
  const CheckpointReader& reader_;
  ThreadPool* pool_;
  ckpt::ParamStateMap map_;
  std::vector<ckpt::ParamTensor> tensors_;
  std::vector<Source> sources_;
  // The key ranges tensor range `r` reads, in order (the pieces of a master or state).
  std::vector<ReadRange> key_ranges(const ckpt::ParamRange& r) const;
  // The planned reads and how far they have come: read() is const, the plan is a hint about it.
  struct Plan {
    std::vector<ckpt::ParamRange> reads;
    std::vector<size_t> ranges;  // the ReadAhead ranges of each read
    size_t next = 0;             // the planned read expected next
    std::shared_ptr<ReadAhead> ahead;
  };
  // How many planned reads past the expected one a read is looked for among.
  static constexpr size_t kPlanLookahead = 16;
  mutable std::mutex plan_mu_;
  mutable Plan plan_;
};

}  // namespace fpg::fpckpt
