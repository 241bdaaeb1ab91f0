#include "app/convert/megatron_hf_view.h"

#include <fmt/format.h>

#include "app/convert/gpt_hf_table.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/shape.h"

namespace fpg::app::convert {

MegatronHfView::MegatronHfView(const MegatronGptTensors& t, const HfModelShape& s) : GatheredView(*t.source) {
  const auto& ts = source().tensors();
  const GptHfTable table = gpt_hf_table(s, MegatronLayerSpec::local);
  // Each Megatron tensor of the table: its index in the source, under its name or its alias.
  std::vector<size_t> at;
  std::vector<bool> used(ts.size(), false);
  for (const GptTensor& g : table.megatron) {
    std::string name = g.name;
    if (!t.find(name) && !megatron_norm_alias(name).empty() && t.find(megatron_norm_alias(name)))
      name = megatron_norm_alias(name);
    const ckpt::ParamTensor* found = t.find(name);
    if (!found) throw UsageError(fmt::format("{}: no {} {}", source().describe(), g.name, shape_string(g.shape)));
    if (found->shape != g.shape)
      throw UsageError(fmt::format("{}: {} is {}; a {} model of this shape has it {}", source().describe(), name,
                                   shape_string(found->shape), hf_arch_name(s.arch), shape_string(g.shape)));
    at.push_back(t.index(name));
    used[at.back()] = true;
  }
  for (const HfTensorLink& h : table.hf) {
    std::vector<Piece> pieces;
    for (const RowBlock& b : h.blocks) {
      const GptTensor& g = table.megatron[b.tensor];
      const uint64_t cols = shape_volume(g.shape) / g.shape[0];
      pieces.push_back({at[b.tensor], b.row * cols, b.rows * cols});
    }
    ckpt::ParamTensor ht;
    ht.name = h.name;
    ht.dtype = ts[at[h.blocks.front().tensor]].dtype;
    ht.shape = h.shape;
    add(std::move(ht), std::move(pieces));
  }

  std::vector<std::string> left;
  for (const auto& [name, i] : t.by_name)
    if (!used[i]) left.push_back(name);
  if (!left.empty())
    throw UsageError(fmt::format("{}: {} tensor{} with no place in a Hugging Face {} model: {}", source().describe(),
                                 left.size(), left.size() == 1 ? "" : "s", hf_arch_name(s.arch), printable_list(left)));
}

}  // namespace fpg::app::convert
