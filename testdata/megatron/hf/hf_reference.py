"""The Hugging Face tensors a Megatron GPT model maps to, computed from the model's own tensors as
Megatron-Core saved them (truth.safetensors of a fixture: whole tensors under their checkpoint names),
in plain Python on the raw bytes (no torch, no numpy), independently of fpgather's C++ mapping.

  python3 hf_reference.py template FIXTURE ARCH OUT.json   a config.json for ARCH from the fixture's
                                                           truth.json (what a user would pass as --hf-config)
  python3 hf_reference.py check FIXTURE ARCH HF_DIR [F32]  HF_DIR's tensors equal the reference, byte for
                                                           byte (names, dtypes, shapes, data); exit 1 if not
                                                           (F32: of an export with --dtype fp32)

FIXTURE is a folder of testdata/megatron/parallel (truth.json + truth.safetensors). The rules (as
Megatron-Core lays its tensors out and transformers names them):
  linear_qkv rows: per query group g, [heads/groups query heads, 1 key head, 1 value head] of
  head_dim rows each; linear_fc1 (SwiGLU): gate rows then up rows; embedding and output layer rows
  beyond the real vocabulary are Megatron's padding.
"""
import json
import os
import struct
import sys

ELEM = {"BF16": 2, "F16": 2, "F32": 4}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], list(t["shape"]), data[a:b])
    return out


def rows(t, r0, n):
    dtype, shape, data = t
    row = ELEM[dtype]
    for d in shape[1:]:
        row *= d
    assert r0 + n <= shape[0]
    return data[r0 * row:(r0 + n) * row]


def bf16_rne(f32_bytes):
    """F32 bytes rounded to BF16, to nearest even (NaN kept quiet)."""
    out = bytearray()
    for (u,) in struct.iter_unpack("<I", f32_bytes):
        if (u & 0x7FFFFFFF) > 0x7F800000:
            h = (u >> 16) | 0x40
        else:
            h = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        out += struct.pack("<H", h & 0xFFFF)
    return bytes(out)


def reference(fixture, arch, dtype="BF16"):
    cfg = json.load(open(os.path.join(fixture, "truth.json")))["config"]
    truth = {k: v for k, v in read_safetensors(os.path.join(fixture, "truth.safetensors")).items()
             if k.endswith(("weight", "bias"))}  # the weights, not NAME.master / NAME.<state>
    H, heads = cfg["hidden"], cfg["heads"]
    groups = cfg["query_groups"] or heads
    d = cfg.get("kv_channels") or H // heads
    per = heads // groups
    vocab = cfg.get("real_vocab") or cfg["vocab"]
    out = {}

    def put(name, held, shape, data):
        assert name not in out, name
        if held == "F32" and dtype == "BF16":  # the export's bf16: F32 tensors rounded once
            held, data = "BF16", bf16_rne(data)
        if held == "BF16" and dtype == "F32":  # fp32: BF16 widened exactly
            held, data = "F32", b"".join(b"\0\0" + data[i:i + 2] for i in range(0, len(data), 2))
        out[name] = (held, shape, data)

    emb = truth["embedding.word_embeddings.weight"]
    put("model.embed_tokens.weight", emb[0], [vocab, H], rows(emb, 0, vocab))
    for L in range(cfg["layers"]):
        m, h = f"decoder.layers.{L}.", f"model.layers.{L}."
        norm = truth.get(m + "self_attention.linear_qkv.layer_norm_weight") or truth[m + "input_layernorm.weight"]
        put(h + "input_layernorm.weight", norm[0], [H], norm[2])
        for part in ("weight", "bias"):
            qkv = truth.get(m + "self_attention.linear_qkv." + part)
            if qkv is None:
                continue
            q = k = v = b""
            for g in range(groups):
                base = g * (per + 2) * d
                q += rows(qkv, base, per * d)
                k += rows(qkv, base + per * d, d)
                v += rows(qkv, base + (per + 1) * d, d)
            tail = [H] if part == "weight" else []
            put(h + "self_attn.q_proj." + part, qkv[0], [heads * d] + tail, q)
            put(h + "self_attn.k_proj." + part, qkv[0], [groups * d] + tail, k)
            put(h + "self_attn.v_proj." + part, qkv[0], [groups * d] + tail, v)
        o = truth[m + "self_attention.linear_proj.weight"]
        put(h + "self_attn.o_proj.weight", o[0], o[1], o[2])
        if cfg.get("qk_norm"):
            for a, b in (("q_layernorm", "q_norm"), ("k_layernorm", "k_norm")):
                t = truth[m + f"self_attention.{a}.weight"]
                put(h + f"self_attn.{b}.weight", t[0], t[1], t[2])
        post = truth.get(m + "mlp.linear_fc1.layer_norm_weight") or truth[m + "pre_mlp_layernorm.weight"]
        put(h + "post_attention_layernorm.weight", post[0], [H], post[2])
        router = truth.get(m + "mlp.router.weight")
        if router is None:
            fc1, fc2 = truth[m + "mlp.linear_fc1.weight"], truth[m + "mlp.linear_fc2.weight"]
            F = fc1[1][0] // 2
            put(h + "mlp.gate_proj.weight", fc1[0], [F, H], rows(fc1, 0, F))
            put(h + "mlp.up_proj.weight", fc1[0], [F, H], rows(fc1, F, F))
            put(h + "mlp.down_proj.weight", fc2[0], fc2[1], fc2[2])
            continue
        moe = h + ("block_sparse_moe." if arch == "mixtral" else "mlp.")
        names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        put(moe + "gate.weight", router[0], router[1], router[2])
        for e in range(cfg["experts"]):
            x = f"{m}mlp.experts.experts.{e}."
            fc1, fc2 = truth[x + "linear_fc1.weight"], truth[x + "linear_fc2.weight"]
            F = fc1[1][0] // 2
            put(f"{moe}experts.{e}.{names[0]}.weight", fc1[0], [F, H], rows(fc1, 0, F))
            put(f"{moe}experts.{e}.{names[1]}.weight", fc1[0], [F, H], rows(fc1, F, F))
            put(f"{moe}experts.{e}.{names[2]}.weight", fc2[0], fc2[1], fc2[2])
    fn = truth["decoder.final_layernorm.weight"]
    put("model.norm.weight", fn[0], fn[1], fn[2])
    if not cfg.get("tied"):
        lm = truth["output_layer.weight"]
        put("lm_head.weight", lm[0], [vocab, H], rows(lm, 0, vocab))
    return out


def template(fixture, arch):
    """A config.json as the user of such a model holds it: what the tensors cannot tell, and the
    shape fields (checked by fpgather against the tensors)."""
    cfg = json.load(open(os.path.join(fixture, "truth.json")))["config"]
    heads = cfg["heads"]
    c = {"model_type": arch, "num_attention_heads": heads,
         "num_key_value_heads": cfg["query_groups"] or heads, "vocab_size": cfg.get("real_vocab") or cfg["vocab"],
         "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 16,
         "hidden_size": cfg["hidden"], "num_hidden_layers": cfg["layers"],
         "tie_word_embeddings": bool(cfg.get("tied"))}
    if cfg.get("kv_channels"):
        c["head_dim"] = cfg["kv_channels"]
    if cfg.get("experts"):
        c["num_experts_per_tok"] = 2
    return c


def check(fixture, arch, hf_dir, dtype="BF16"):
    want = reference(fixture, arch, dtype)
    got = {}
    for f in sorted(os.listdir(hf_dir)):
        if f.endswith(".safetensors"):
            got.update(read_safetensors(os.path.join(hf_dir, f)))
    bad = []
    for name in sorted(set(want) | set(got)):
        if name not in got:
            bad.append(f"{name}: missing")
        elif name not in want:
            bad.append(f"{name}: unexpected")
        elif got[name][:2] != want[name][:2]:
            bad.append(f"{name}: {got[name][:2]} != {want[name][:2]}")
        elif got[name][2] != want[name][2]:
            bad.append(f"{name}: data differs")
    print(f"{fixture} as {arch}: {len(want)} tensors, {len(bad)} differ")
    for b in bad[:20]:
        print("  " + b)
    return not bad


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "template":
        json.dump(template(sys.argv[2], sys.argv[3]), open(sys.argv[4], "w"), indent=1)
    elif cmd == "check":
        sys.exit(0 if check(sys.argv[2], sys.argv[3], sys.argv[4], *sys.argv[5:6]) else 1)
    else:
        sys.exit(f"unknown command {cmd}")
