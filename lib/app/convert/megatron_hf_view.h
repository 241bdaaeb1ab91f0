// A Megatron-Core GPT checkpoint seen as a Hugging Face model's tensors: a ckpt::ParamSource whose
// tensors carry transformers' names and shapes, each gathered from the Megatron row blocks the table of
// gpt_hf_table.h lists for it, so that the streaming export (param_export.h) writes a model directory
// without holding more than its slabs. A Megatron tensor the table does not consume (a linear bias,
// shared experts, a router's expert bias …) is refused by name: nothing is dropped silently.
#pragma once

#include <string>
#include <vector>

#include "app/convert/gathered_view.h"
#include "app/convert/hf_model.h"

namespace fpg::app::convert {

class MegatronHfView : public GatheredView {
 public:
  // `t`: the Megatron tensors read (weights or masters) of `t.source`, which must outlive the view.
  // UsageError naming the Megatron tensors left unmapped, or one whose shape is not the model's.
  MegatronHfView(const MegatronGptTensors& t, const HfModelShape& shape);
};

}  // namespace fpg::app::convert
