"""Small Hugging Face model directories of each architecture `convert --to megatron` imports, and the
Megatron-Core tensors each must become, computed here in plain Python (no torch, no numpy),
independently of fpgather's C++ table.

  python3 make_hf_models.py OUT_DIR

writes OUT_DIR/ARCH/{config.json, model.safetensors} (the HF model: BF16 values of a fixed sequence,
transformers' names and config fields) and OUT_DIR/ARCH/megatron.safetensors (the golden: every
Megatron parameter whole, under the name fpgather's reader gives it, BF16, the vocabulary padded to 128
rows with zeros). The rules, as Megatron-Core lays its tensors out:
  linear_qkv (weight and bias): per query group g, the group's heads/groups query heads, then its key
  head, then its value head, head_dim rows each;
  linear_fc1: gate_proj's rows, then up_proj's (an expert's: w1 then w3);
  norms: input_layernorm -> self_attention.linear_qkv.layer_norm_weight, post_attention_layernorm ->
  mlp.linear_fc1.layer_norm_weight (the local spec's names);
  experts: decoder.layers.L.mlp.experts.experts.E.linear_fc1/linear_fc2.weight, router mlp.router.weight.
Models: llama (GQA, untied), mistral (tied, a sliding window), qwen2 (q/k/v biases, tied, MHA), qwen3 (q/k norms,
head_dim 16 with hidden 32), mixtral (4 experts, top 2), qwen3_moe (layer 0 dense by mlp_only_layers,
4 experts). Each has 2 layers, hidden 32, 4 heads, FFN 48, vocabulary 100.
"""
import json
import os
import struct
import sys

H, LAYERS, HEADS, VOCAB, PADDED, FFN, EXPERTS, MOE_FFN = 32, 2, 4, 100, 128, 48, 4, 24


class Values:
    """BF16 bit patterns of a fixed sequence of small floats (a 32-bit LCG), distinct per tensor."""

    def __init__(self, seed):
        self.state = seed

    def take(self, n):
        out = []
        for _ in range(n):
            self.state = (self.state * 1664525 + 1013904223) & 0xFFFFFFFF
            v = ((self.state >> 8) / float(1 << 24) - 0.5) * 0.25
            out.append(struct.unpack("<I", struct.pack("<f", v))[0] >> 16)  # truncated: exactly BF16
        return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def write_safetensors(path, tensors):
    """tensors: name -> (shape, list of BF16 bit patterns), written in name order."""
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        shape, bits = tensors[name]
        assert len(bits) == numel(shape), name
        blob = struct.pack(f"<{len(bits)}H", *bits)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def rows(t, r0, n):
    shape, bits = t
    width = numel(shape[1:])
    return bits[r0 * width:(r0 + n) * width]


MODELS = {
    "llama": dict(kv=2, tied=False, bias=False, qk_norm=False, head_dim=8, moe=None),
    "mistral": dict(kv=2, tied=True, bias=False, qk_norm=False, head_dim=8, moe=None),
    "qwen2": dict(kv=4, tied=True, bias=True, qk_norm=False, head_dim=8, moe=None),
    "qwen3": dict(kv=2, tied=False, bias=False, qk_norm=True, head_dim=16, moe=None),
    "mixtral": dict(kv=2, tied=False, bias=False, qk_norm=False, head_dim=8, moe=[True, True]),
    "qwen3_moe": dict(kv=2, tied=False, bias=False, qk_norm=True, head_dim=8, moe=[False, True]),
}
CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}


def make(arch, out):
    m = MODELS[arch]
    kv, d = m["kv"], m["head_dim"]
    per = HEADS // kv
    vals = Values(sum(map(ord, arch)))
    hf = {}

    def put(name, shape):
        hf[name] = (shape, vals.take(numel(shape)))

    config = {"architectures": [CLASSES[arch]], "model_type": arch, "hidden_size": H, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "num_key_value_heads": kv, "head_dim": d, "vocab_size": VOCAB,
              "intermediate_size": FFN, "tie_word_embeddings": m["tied"], "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0, "max_position_embeddings": 64, "hidden_act": "silu", "torch_dtype": "bfloat16"}
    if arch == "mistral":
        config.update(sliding_window=4096)
    if arch == "mixtral":
        config.update(intermediate_size=MOE_FFN, num_local_experts=EXPERTS, num_experts_per_tok=2)
    if arch == "qwen3_moe":
        config.update(moe_intermediate_size=MOE_FFN, num_experts=EXPERTS, num_experts_per_tok=2,
                      mlp_only_layers=[0], decoder_sparse_step=1, norm_topk_prob=True)
    put("model.embed_tokens.weight", [VOCAB, H])
    for L in range(LAYERS):
        h = f"model.layers.{L}."
        put(h + "input_layernorm.weight", [H])
        for p, r in (("q_proj", HEADS * d), ("k_proj", kv * d), ("v_proj", kv * d)):
            put(h + f"self_attn.{p}.weight", [r, H])
            if m["bias"]:
                put(h + f"self_attn.{p}.bias", [r])
        put(h + "self_attn.o_proj.weight", [H, HEADS * d])
        if m["qk_norm"]:
            put(h + "self_attn.q_norm.weight", [d])
            put(h + "self_attn.k_norm.weight", [d])
        put(h + "post_attention_layernorm.weight", [H])
        if m["moe"] and m["moe"][L]:
            g = h + ("block_sparse_moe." if arch == "mixtral" else "mlp.")
            put(g + "gate.weight", [EXPERTS, H])
            names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
            for e in range(EXPERTS):
                put(f"{g}experts.{e}.{names[0]}.weight", [MOE_FFN, H])
                put(f"{g}experts.{e}.{names[1]}.weight", [MOE_FFN, H])
                put(f"{g}experts.{e}.{names[2]}.weight", [H, MOE_FFN])
        else:
            put(h + "mlp.gate_proj.weight", [FFN, H])
            put(h + "mlp.up_proj.weight", [FFN, H])
            put(h + "mlp.down_proj.weight", [H, FFN])
    put("model.norm.weight", [H])
    if not m["tied"]:
        put("lm_head.weight", [VOCAB, H])

    mg = {}
    pad = [0] * ((PADDED - VOCAB) * H)
    mg["embedding.word_embeddings.weight"] = ([PADDED, H], hf["model.embed_tokens.weight"][1] + pad)
    for L in range(LAYERS):
        h, x = f"model.layers.{L}.", f"decoder.layers.{L}."
        mg[x + "self_attention.linear_qkv.layer_norm_weight"] = hf[h + "input_layernorm.weight"]
        for part in ("weight", "bias") if m["bias"] else ("weight",):
            q, k, v = (hf[h + f"self_attn.{p}.{part}"] for p in ("q_proj", "k_proj", "v_proj"))
            bits = []
            for g in range(kv):
                bits += rows(q, g * per * d, per * d) + rows(k, g * d, d) + rows(v, g * d, d)
            mg[x + f"self_attention.linear_qkv.{part}"] = ([(HEADS + 2 * kv) * d] + ([H] if part == "weight" else []),
                                                            bits)
        mg[x + "self_attention.linear_proj.weight"] = hf[h + "self_attn.o_proj.weight"]
        if m["qk_norm"]:
            mg[x + "self_attention.q_layernorm.weight"] = hf[h + "self_attn.q_norm.weight"]
            mg[x + "self_attention.k_layernorm.weight"] = hf[h + "self_attn.k_norm.weight"]
        mg[x + "mlp.linear_fc1.layer_norm_weight"] = hf[h + "post_attention_layernorm.weight"]
        if m["moe"] and m["moe"][L]:
            g = h + ("block_sparse_moe." if arch == "mixtral" else "mlp.")
            names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
            mg[x + "mlp.router.weight"] = hf[g + "gate.weight"]
            for e in range(EXPERTS):
                w, up, down = (hf[f"{g}experts.{e}.{n}.weight"] for n in names)
                mg[f"{x}mlp.experts.experts.{e}.linear_fc1.weight"] = ([2 * MOE_FFN, H], w[1] + up[1])
                mg[f"{x}mlp.experts.experts.{e}.linear_fc2.weight"] = down
        else:
            mg[x + "mlp.linear_fc1.weight"] = ([2 * FFN, H], hf[h + "mlp.gate_proj.weight"][1] +
                                               hf[h + "mlp.up_proj.weight"][1])
            mg[x + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
    mg["decoder.final_layernorm.weight"] = hf["model.norm.weight"]
    if not m["tied"]:
        mg["output_layer.weight"] = ([PADDED, H], hf["lm_head.weight"][1] + pad)

    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), hf)
    write_safetensors(os.path.join(out, "megatron.safetensors"), mg)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    for a in MODELS:
        make(a, os.path.join(sys.argv[1], a))
