// A Hugging Face model seen as the whole tensors of a Megatron-Core GPT model: a ckpt::ParamSource whose
// tensors carry Megatron's parameter names and shapes (GptHfTable::megatron, in that order), each
// gathered from the HF tensors the table places in it (its vocabulary padding as zeros), in one dtype.
// The inverse of megatron_hf_view.h through the same table; what the import writes (hf_import.h).
#pragma once

#include <string>
#include <vector>

#include "app/convert/gathered_view.h"
#include "app/convert/gpt_hf_table.h"

namespace fpg::app::convert {

class HfMegatronView : public GatheredView {
 public:
  // `hf` (the HF model's tensors) must outlive the view; `dtype` BF16 or F32. UsageError naming the HF
  // tensors missing from `hf`, one whose shape is not the table's, one that is no float to convert,
  // and the tensors left over (none may be dropped but lm_head.weight of a tied model and rotary
  // inverse frequencies, which transformers ignores too; each is a note).
  HfMegatronView(const ckpt::ParamSource& hf, const GptHfTable& table, DType dtype, std::vector<std::string>& notes);
};

}  // namespace fpg::app::convert
