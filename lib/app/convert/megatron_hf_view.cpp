#include "app/convert/megatron_hf_view.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace fpg::app::convert {

MegatronHfView::MegatronHfView(const MegatronGptTensors& t, const HfModelShape& s) : src_(t.source) {
  const auto& ts = src_->tensors();
  std::vector<bool> used(ts.size(), false);
  auto take = [&](const std::string& name) -> size_t {
    const size_t i = t.index(name);
    used[i] = true;
    return i;
  };
  auto whole = [&](const std::string& name) {
    const size_t i = take(name);
    return Piece{i, 0, ts[i].numel()};
  };
  // Rows [r0, r0 + n) of a tensor, a row being everything after its first dimension.
  auto rows = [&](const std::string& name, uint64_t r0, uint64_t n) {
    const size_t i = take(name);
    const uint64_t cols = ts[i].shape.empty() || ts[i].shape[0] == 0 ? 1 : ts[i].numel() / ts[i].shape[0];
    if (ts[i].shape.empty() || r0 + n > ts[i].shape[0])
      throw InternalError(fmt::format("hf: rows [{}, {}) of {}", r0, r0 + n, name));
    return Piece{i, r0 * cols, n * cols};
  };
  auto either = [&](const std::string& a, const std::string& b) { return t.find(a) ? a : b; };
  auto shape_of = [&](const std::string& name) { return ts[t.index(name)].shape; };

  const uint64_t H = s.hidden, d = s.head_dim, per_group = s.heads / s.kv_heads;
  add("model.embed_tokens.weight", {s.vocab, H}, {rows("embedding.word_embeddings.weight", 0, s.vocab)});
  for (uint64_t l = 0; l < s.layers; ++l) {
    const std::string m = fmt::format("decoder.layers.{}.", l), h = fmt::format("model.layers.{}.", l);
    add(h + "input_layernorm.weight", {H},
        {whole(either(m + "self_attention.linear_qkv.layer_norm_weight", m + "input_layernorm.weight"))});
    for (const char* part : {"weight", "bias"}) {
      const std::string qkv = m + "self_attention.linear_qkv." + part;
      if (!t.find(qkv)) continue;
      const bool w = std::string(part) == "weight";
      std::vector<Piece> q, k, v;
      for (uint64_t g = 0; g < s.kv_heads; ++g) {
        const uint64_t base = g * (per_group + 2) * d;
        q.push_back(rows(qkv, base, per_group * d));
        k.push_back(rows(qkv, base + per_group * d, d));
        v.push_back(rows(qkv, base + (per_group + 1) * d, d));
      }
      auto shp = [&](uint64_t r) { return w ? std::vector<uint64_t>{r, H} : std::vector<uint64_t>{r}; };
      add(h + "self_attn.q_proj." + part, shp(s.heads * d), std::move(q));
      add(h + "self_attn.k_proj." + part, shp(s.kv_heads * d), std::move(k));
      add(h + "self_attn.v_proj." + part, shp(s.kv_heads * d), std::move(v));
    }
    add(h + "self_attn.o_proj.weight", {H, s.heads * d}, {whole(m + "self_attention.linear_proj.weight")});
    if (s.qk_norm) {
      add(h + "self_attn.q_norm.weight", {d}, {whole(m + "self_attention.q_layernorm.weight")});
      add(h + "self_attn.k_norm.weight", {d}, {whole(m + "self_attention.k_layernorm.weight")});
    }
    add(h + "post_attention_layernorm.weight", {H},
        {whole(either(m + "mlp.linear_fc1.layer_norm_weight", m + "pre_mlp_layernorm.weight"))});
    if (!s.moe_layer[l]) {
      const std::string fc1 = m + "mlp.linear_fc1.weight", fc2 = m + "mlp.linear_fc2.weight";
      add(h + "mlp.gate_proj.weight", {s.ffn, H}, {rows(fc1, 0, s.ffn)});
      add(h + "mlp.up_proj.weight", {s.ffn, H}, {rows(fc1, s.ffn, s.ffn)});
      if (shape_of(fc2) != std::vector<uint64_t>{H, s.ffn})
        throw UsageError(fmt::format("{}: {} should be [{}, {}]", src_->describe(), fc2, H, s.ffn));
      add(h + "mlp.down_proj.weight", {H, s.ffn}, {whole(fc2)});
      continue;
    }
    const bool mixtral = s.arch == HfArch::mixtral;
    const std::string moe = h + (mixtral ? "block_sparse_moe." : "mlp.");
    add(moe + "gate.weight", {s.experts, H}, {whole(m + "mlp.router.weight")});
    for (uint64_t e = 0; e < s.experts; ++e) {
      const std::string x = fmt::format("{}mlp.experts.experts.{}.", m, e), y = fmt::format("{}experts.{}.", moe, e);
      const std::string fc1 = x + "linear_fc1.weight", fc2 = x + "linear_fc2.weight";
      if (shape_of(fc1) != std::vector<uint64_t>{2 * s.moe_ffn, H} || !t.find(fc2) ||
          shape_of(fc2) != std::vector<uint64_t>{H, s.moe_ffn})
        throw UsageError(fmt::format("{}: expert {} of layer {} should have linear_fc1 [{}, {}] and linear_fc2 [{}, {}]",
                                     src_->describe(), e, l, 2 * s.moe_ffn, H, H, s.moe_ffn));
      add(y + (mixtral ? "w1.weight" : "gate_proj.weight"), {s.moe_ffn, H}, {rows(fc1, 0, s.moe_ffn)});
      add(y + (mixtral ? "w3.weight" : "up_proj.weight"), {s.moe_ffn, H}, {rows(fc1, s.moe_ffn, s.moe_ffn)});
      add(y + (mixtral ? "w2.weight" : "down_proj.weight"), {H, s.moe_ffn}, {whole(fc2)});
    }
  }
  add("model.norm.weight", {H}, {whole("decoder.final_layernorm.weight")});
  if (!s.tied) add("lm_head.weight", {s.vocab, H}, {rows("output_layer.weight", 0, s.vocab)});

  std::vector<std::string> left;
  for (const auto& [name, i] : t.by_name)
    if (!used[i]) left.push_back(name);
  if (!left.empty()) {
    std::string list;
    for (size_t i = 0; i < left.size() && i < 8; ++i) list += (i ? ", " : "") + left[i];
    if (left.size() > 8) list += fmt::format(" (and {} more)", left.size() - 8);
    throw UsageError(fmt::format("{}: {} tensor{} with no place in a Hugging Face {} model: {}", src_->describe(),
                                 left.size(), left.size() == 1 ? "" : "s", hf_arch_name(s.arch), list));
  }
}

void MegatronHfView::add(const std::string& name, std::vector<uint64_t> shape, std::vector<Piece> pieces) {
  const ckpt::ParamTensor& first = src_->tensors()[pieces.front().src];
  Mapped m;
  uint64_t at = 0;
  for (const Piece& p : pieces) {
    if (src_->tensors()[p.src].dtype != first.dtype)
      throw InternalError("hf: " + name + " gathers tensors of two dtypes");
    m.starts.push_back(at);
    at += p.n;
  }
  ckpt::ParamTensor t;
  t.name = t.param = name;
  t.role = "weight";
  t.dtype = first.dtype;
  t.shape = std::move(shape);
  if (t.numel() != at)
    throw InternalError(fmt::format("hf: {} has {} elements, its pieces {}", name, t.numel(), at));
  m.pieces = std::move(pieces);
  tensors_.push_back(std::move(t));
  map_.push_back(std::move(m));
}

template <class F>
void MegatronHfView::for_pieces(size_t t, uint64_t lo, uint64_t hi, F&& f) const {
  const Mapped& m = map_.at(t);
  size_t p = static_cast<size_t>(std::upper_bound(m.starts.begin(), m.starts.end(), lo) - m.starts.begin()) - 1;
  for (uint64_t at = lo; at < hi; ++p) {
    const Piece& piece = m.pieces.at(p);
    const uint64_t off = at - m.starts[p], n = std::min(piece.n - off, hi - at);
    f(piece.src, piece.lo + off, n, at - lo);
    at += n;
  }
}

void MegatronHfView::read(size_t t, uint64_t lo, uint64_t hi, void* out) const {
  const ckpt::ParamTensor& tensor = tensors_.at(t);
  if (lo > hi || hi > tensor.numel())
    throw InternalError(fmt::format("hf: read [{}, {}) of {} ({} elements)", lo, hi, tensor.name, tensor.numel()));
  const uint64_t elem = std::max<uint64_t>(dtype_bits(tensor.dtype) / 8, 1);
  auto* bytes = static_cast<uint8_t*>(out);
  for_pieces(t, lo, hi, [&](size_t src, uint64_t a, uint64_t n, uint64_t at) { src_->read(src, a, a + n, bytes + at * elem); });
}

void MegatronHfView::plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t window) const {
  std::vector<ckpt::ParamRange> mapped;
  for (const ckpt::ParamRange& r : reads)
    for_pieces(r.tensor, r.lo, r.hi, [&](size_t src, uint64_t a, uint64_t n, uint64_t) { mapped.push_back({src, a, a + n}); });
  src_->plan_reads(std::move(mapped), window);
}

}  // namespace fpg::app::convert
