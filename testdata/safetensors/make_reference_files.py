#!/usr/bin/env python3
"""Writes safetensors files with the official library (safetensors.numpy, ml_dtypes for bf16/fp8)
and reference_manifest.json describing them, for the reader/writer interop tests
(tests/unit/safetensors_interop_test.cpp). Rerunnable; the output is deterministic.

  python3 testdata/safetensors/make_reference_files.py

Outputs, next to this script:
  reference_all_dtypes.safetensors  every dtype numpy can hand to safetensors, odd sizes, scalars,
                                    zero-size tensors, one metadata key
  reference_empty.safetensors       no tensors, no metadata
  sharded/model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json (as HF writes it)
  reference_manifest.json           per file: metadata, and tensors in file order with dtype, shape
                                    and the data as hex
F4 and F6 are absent: the numpy front end of safetensors 0.8 does not take them.
"""
import json
import os
import struct

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))

# (safetensors name, numpy dtype)
DTYPES = [
    ("BOOL", np.bool_), ("U8", np.uint8), ("I8", np.int8),
    ("F8_E5M2", ml_dtypes.float8_e5m2), ("F8_E4M3", ml_dtypes.float8_e4m3fn),
    ("F8_E8M0", ml_dtypes.float8_e8m0fnu), ("F8_E4M3FNUZ", ml_dtypes.float8_e4m3fnuz),
    ("F8_E5M2FNUZ", ml_dtypes.float8_e5m2fnuz), ("I16", np.int16), ("U16", np.uint16),
    ("F16", np.float16), ("BF16", ml_dtypes.bfloat16), ("I32", np.int32), ("U32", np.uint32),
    ("F32", np.float32), ("C64", np.complex64), ("F64", np.float64), ("I64", np.int64),
    ("U64", np.uint64),
]
SHAPES = [(3,), (), (2, 5), (0,), (1, 3, 3), (4, 0, 2), (7,)]


def make_tensor(rng, dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    itemsize = np.dtype(dtype).itemsize
    raw = rng.integers(0, 256, size=n * itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def header_of(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def describe(path, tensors):
    header = header_of(path)
    meta = header.pop("__metadata__", None)
    items = sorted(header.items(), key=lambda kv: (tuple(kv[1]["data_offsets"]), kv[0]))
    out = []
    for name, info in items:
        arr = tensors[name]
        assert list(arr.shape) == info["shape"]
        out.append({"name": name, "dtype": info["dtype"], "shape": info["shape"],
                    "data_offsets": info["data_offsets"], "hex": arr.tobytes().hex()})
    return {"metadata": meta, "tensors": out}


def main():
    rng = np.random.default_rng(20260501)
    manifest = {}

    tensors = {}
    for i, (name, dtype) in enumerate(DTYPES):
        for j, shape in enumerate(SHAPES[(i % 3):(i % 3) + 3]):
            tensors[f"layer{j}.{name.lower()}"] = make_tensor(rng, dtype, shape)
    path = os.path.join(HERE, "reference_all_dtypes.safetensors")
    save_file(tensors, path, metadata={"format": "np"})
    manifest["reference_all_dtypes.safetensors"] = describe(path, tensors)

    path = os.path.join(HERE, "reference_empty.safetensors")
    save_file({}, path)
    manifest["reference_empty.safetensors"] = describe(path, {})

    # A sharded model, written as transformers' save_pretrained does.
    shard_dir = os.path.join(HERE, "sharded")
    os.makedirs(shard_dir, exist_ok=True)
    shards = [
        {"embed.weight": make_tensor(rng, ml_dtypes.bfloat16, (8, 4)),
         "layers.0.w": make_tensor(rng, np.float32, (4, 4))},
        {"layers.1.w": make_tensor(rng, np.float32, (4, 4)),
         "norm.scale": make_tensor(rng, ml_dtypes.bfloat16, (4,)),
         "step": make_tensor(rng, np.int64, ())},
    ]
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        fpath = os.path.join(shard_dir, fname)
        save_file(shard, fpath, metadata={"format": "pt"})
        manifest["sharded/" + fname] = describe(fpath, shard)
        for name, arr in shard.items():
            weight_map[name] = fname
            total += arr.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")

    with open(os.path.join(HERE, "reference_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
