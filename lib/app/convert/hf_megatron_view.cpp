#include "app/convert/hf_megatron_view.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/printable.h"
#include "core/shape.h"

namespace fpg::app::convert {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

HfMegatronView::HfMegatronView(const ckpt::ParamSource& hf, const GptHfTable& table, DType dtype,
                               std::vector<std::string>& notes)
    : GatheredView(hf) {
  const auto& ts = hf.tensors();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < ts.size(); ++i) index.emplace(ts[i].name, i);
  std::vector<bool> used(ts.size(), false);

  // Per Megatron tensor, the HF elements that fall in it: (Megatron element, piece).
  std::vector<std::vector<std::pair<uint64_t, Piece>>> parts(table.megatron.size());
  std::vector<std::string> missing;
  for (const HfTensorLink& h : table.hf) {
    const auto it = index.find(h.name);
    if (it == index.end()) {
      missing.push_back(h.name);
      continue;
    }
    const ckpt::ParamTensor& t = ts[it->second];
    if (t.shape != h.shape)
      throw UsageError(fmt::format("{}: {} is {}; the model config.json describes has it {}", hf.describe(), h.name,
                                   shape_string(t.shape), shape_string(h.shape)));
    if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32 && t.dtype != DType::F64)
      throw UsageError(fmt::format("{}: {} is {}: an import reads BF16, F16, F32 or F64 tensors (an FP8 model: "
                                   "dequantize it first with `fpgather convert IN OUT --dequantize`)",
                                   hf.describe(), h.name, dtype_name(t.dtype)));
    used[it->second] = true;
    uint64_t at = 0;
    for (const RowBlock& b : h.blocks) {
      const GptTensor& g = table.megatron[b.tensor];
      const uint64_t cols = shape_volume(g.shape) / g.shape[0], n = b.rows * cols;
      parts[b.tensor].push_back({b.row * cols, Piece{it->second, at, n}});
      at += n;
    }
  }
  if (!missing.empty())
    throw UsageError(fmt::format("{}: {} tensor{} of the model its config.json describes {} missing: {}", hf.describe(),
                                 missing.size(), missing.size() == 1 ? "" : "s", missing.size() == 1 ? "is" : "are",
                                 printable_list(missing)));

  std::vector<std::string> left;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (used[i]) continue;
    if (ts[i].name == "lm_head.weight")  // the table has none: a tied model
      notes.push_back("lm_head.weight left out: tie_word_embeddings makes the output layer the embedding");
    else if (ends_with(ts[i].name, ".rotary_emb.inv_freq"))
      notes.push_back(printable(ts[i].name) + " left out: rotary frequencies are computed, not loaded");
    else
      left.push_back(ts[i].name);
  }
  if (!left.empty())
    throw UsageError(fmt::format("{}: {} tensor{} with no place in a Megatron-Core GPT model: {}", hf.describe(),
                                 left.size(), left.size() == 1 ? "" : "s", printable_list(left)));

  for (size_t m = 0; m < table.megatron.size(); ++m) {
    const GptTensor& g = table.megatron[m];
    auto& p = parts[m];
    std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Piece> pieces;
    uint64_t at = 0;
    for (const auto& [start, piece] : p) {
      if (start < at) throw InternalError("hf: two HF tensors in one place of " + g.name);
      if (start > at) pieces.push_back({std::nullopt, 0, start - at});  // vocabulary padding
      pieces.push_back(piece);
      at = start + piece.n;
    }
    if (at < shape_volume(g.shape)) pieces.push_back({std::nullopt, 0, shape_volume(g.shape) - at});
    ckpt::ParamTensor t;
    t.name = g.name;
    t.shape = g.shape;
    t.dtype = dtype;
    add(std::move(t), std::move(pieces));
  }
}

}  // namespace fpg::app::convert
