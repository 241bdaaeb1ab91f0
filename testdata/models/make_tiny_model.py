#!/usr/bin/env python3
"""Writes the small bundled model that the README quick start and the CLI tests quantize.

    python3 testdata/models/make_tiny_model.py      # needs numpy, ml_dtypes, safetensors

Outputs (deterministic: fixed seed, so rerunning reproduces the same bytes):
  testdata/models/tiny-llama.safetensors            one file, ~1M parameters, bf16 + fp32 + int64
  testdata/models/tiny-llama-sharded/               the same tensors in two shards with
      model.safetensors.index.json                  a Hugging Face style index
      model-00001-of-00002.safetensors
      model-00002-of-00002.safetensors

Shapes are chosen to exercise the recipes: the hidden size 160 is a multiple of 32 (MXFP8 takes it)
but not of 128 (blockwise gets partial edge blocks); a 3-D fp32 tensor checks that M is the product
of the leading dimensions; 1-D norms and the int64 tensor are copied unchanged by default.
"""
import json
import os

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
HIDDEN, INTER, VOCAB, KV, LAYERS = 160, 416, 1000, 64, 2


def bf16(a):
    return a.astype(np.float32).astype(ml_dtypes.bfloat16)


def build():
    rng = np.random.default_rng(20261129)
    t = {}

    def w(shape, std=0.02):
        x = rng.normal(0.0, std, size=shape).astype(np.float32)
        # a few outliers per tensor, as real checkpoints have, so block scales differ
        idx = rng.integers(0, x.size, size=max(1, x.size // 5000))
        x.reshape(-1)[idx] *= 40.0
        return x

    t["model.embed_tokens.weight"] = bf16(w((VOCAB, HIDDEN)))
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = bf16(1.0 + w((HIDDEN,), 0.1))
        t[p + "self_attn.q_proj.weight"] = bf16(w((HIDDEN, HIDDEN)))
        t[p + "self_attn.k_proj.weight"] = bf16(w((KV, HIDDEN)))
        t[p + "self_attn.v_proj.weight"] = bf16(w((KV, HIDDEN)))
        t[p + "self_attn.o_proj.weight"] = bf16(w((HIDDEN, HIDDEN)))
        t[p + "post_attention_layernorm.weight"] = bf16(1.0 + w((HIDDEN,), 0.1))
        t[p + "mlp.gate_proj.weight"] = bf16(w((INTER, HIDDEN)))
        t[p + "mlp.up_proj.weight"] = bf16(w((INTER, HIDDEN)))
        t[p + "mlp.down_proj.weight"] = bf16(w((HIDDEN, INTER)))
    t["model.experts.w1"] = w((4, 96, HIDDEN))  # fp32, 3-D
    t["model.norm.weight"] = bf16(1.0 + w((HIDDEN,), 0.1))
    t["model.position_ids"] = np.arange(64, dtype=np.int64).reshape(1, 64)
    t["lm_head.weight"] = bf16(w((VOCAB, HIDDEN)))
    return t


def main():
    tensors = build()
    meta = {"format": "pt", "producer": "fpgather testdata/models/make_tiny_model.py"}
    save_file(tensors, os.path.join(HERE, "tiny-llama.safetensors"), metadata=meta)

    shard_dir = os.path.join(HERE, "tiny-llama-sharded")
    os.makedirs(shard_dir, exist_ok=True)
    names = list(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map, total = {}, 0
    for k, part in enumerate(halves):
        fname = f"model-{k + 1:05d}-of-{len(halves):05d}.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(shard_dir, fname), metadata=meta)
        for n in part:
            weight_map[n] = fname
            total += tensors[n].nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
