// An fpgather checkpoint as a ckpt::ParamSource: per parameter of its model spec, the weight as held
// ("weight/NAME"; FP8 parameters, stored as FP8 bytes and scales, have none here), the fp32 master and
// the optimizer states, wherever the state layout (bucket or model) puts them (ckpt/param_state_map.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/param_source.h"
#include "ckpt/param_state_map.h"
#include "formats/fpckpt/reader.h"

namespace fpg::fpckpt {

class CheckpointParams : public ckpt::ParamSource {
 public:
  // FormatError when the index's documents do not describe the parameters (ParamStateMap).
  CheckpointParams(const CheckpointReader& reader, ThreadPool* pool = nullptr);

  std::string describe() const override;
  const std::vector<ckpt::ParamTensor>& tensors() const override { return tensors_; }
  void read(size_t t, uint64_t lo, uint64_t hi, void* out) const override;
  void will_read(size_t t, uint64_t lo, uint64_t hi) const override;  // CheckpointReader::prefetch

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
};

}  // namespace fpg::fpckpt
