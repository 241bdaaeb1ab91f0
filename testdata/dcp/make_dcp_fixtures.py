#!/usr/bin/env python3
"""Writes the PyTorch Distributed Checkpoint fixtures of testdata/dcp with torch itself.

Run where torch is installed (CPU only; four gloo processes):
    /work/torchenv/bin/python testdata/dcp/make_dcp_fixtures.py

Outputs (committed; CI has no torch and reads them):
  torch_save_4ranks/   dcp.save by 4 ranks, default TORCH_SAVE serialization: a small model and its
                       AdamW state as DTensors (rows sharded over 4 ranks, uneven: chunks of 2, 2, 1
                       and 0 rows), a 2-D and a 3-D tensor sharded over a 2x2 mesh, bf16 / int64 /
                       fp8 / 0-d tensors, and bytes entries (param groups, Megatron-like bucket sizes
                       keyed by dtype tuples, a list, a numpy array).
  safetensors_4ranks/  the same state saved with serialization_format=SAFETENSORS.
  expected_4ranks.safetensors   every tensor of that state in full (gathered), by fqn.
  expected_4ranks.json          repr() of every bytes entry that holds plain Python data.
  small/               one process (no_dist): one tensor of each dtype, a 0-d tensor, bytes entries.
  expected_small.safetensors, expected_small.json   its ground truth, as above.
  torch_save/          standalone torch.save files: views with storage offsets and strides, fp8
                       (_rebuild_tensor_v3), an object of every plain Python type, an integer beyond
                       64 bits; expected_torch_save.safetensors / .json hold their values.
  broken/              hand-broken variants: a .metadata calling os.system, a truncated .metadata, a
                       relative_path '../x', a symlinked data file, a flipped byte in a tensor record,
                       and metadata-only files with a gap, an overlap, offsets of the wrong arity, a
                       chunk past the tensor's end, a chunk without a storage entry.
"""
import io
import json
import os
import pickle
import shutil
import struct
import sys
import zipfile

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint.filesystem import FileSystemWriter, SerializationFormat
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor, init_device_mesh

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 4

SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
}


def write_safetensors(path, tensors):
    """A minimal safetensors writer (the ground truth files; keys sorted, data in that order)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def has_array(v):
    if isinstance(v, (torch.Tensor, np.ndarray)):
        return True
    if isinstance(v, dict):
        return any(has_array(k) or has_array(x) for k, x in v.items())
    if isinstance(v, (list, tuple, set, frozenset)):
        return any(has_array(x) for x in v)
    return False


def write_ground_truth(flat, tensors_path, objects_path):
    """Tensors (full values) to a safetensors file, plain bytes entries as repr() to JSON."""
    tensors, objects = {}, {}
    for fqn, v in flat.items():
        if isinstance(v, torch.Tensor):
            tensors[fqn] = v
        elif not has_array(v):
            objects[fqn] = repr(v)
    write_safetensors(tensors_path, tensors)
    with open(objects_path, "w") as f:
        json.dump(objects, f, indent=1, sort_keys=True)
        f.write("\n")


def sharded_state(rank):
    """The 4-rank state dict: model + AdamW as DTensors, grid-sharded tensors, bytes entries."""
    mesh = init_device_mesh("cpu", (WORLD,))
    grid = init_device_mesh("cpu", (2, 2))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 5), nn.LayerNorm(5))

    def shard_rows(name, module, mesh):
        for n, p in list(module.named_parameters(recurse=False)):
            placement = [Shard(0)] if p.dim() == 2 else [Replicate()]
            module.register_parameter(n, nn.Parameter(distribute_tensor(p.data, mesh, placement)))

    distribute_module(model, mesh, shard_rows)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(2):
        for p in model.parameters():
            g = torch.randn(p.shape, generator=torch.Generator().manual_seed(100 * step + p.numel()))
            p.grad = distribute_tensor(g, mesh, p.placements)
        opt.step()
    model_sd, optim_sd = get_state_dict(model, opt)
    g = torch.Generator().manual_seed(7)
    extra = {
        "grid2d": distribute_tensor(torch.randn(4, 6, generator=g), grid, [Shard(0), Shard(1)]),
        "grid3d": distribute_tensor(torch.randn(4, 3, 4, generator=g).to(torch.bfloat16), grid,
                                    [Shard(0), Shard(2)]),
        "rows_i64": distribute_tensor(torch.arange(10, dtype=torch.int64).reshape(5, 2), mesh, [Shard(0)]),
        "fp8": torch.linspace(-2, 2, 8).to(torch.float8_e4m3fn),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }
    objects = {
        "per_bucket_numel": [{(torch.bfloat16, torch.float32): [1024, 896]}],
        "steps": [3, -7, 2**40],
        "rng": {"python": (3, (1, 2, 3), None), "numpy": np.arange(4, dtype=np.uint32)},
    }
    return {"model": model_sd, "optim": optim_sd, "extra": extra, "objects": objects}


def full(v):
    return v.full_tensor() if isinstance(v, DTensor) else v


def sharded_worker(rank, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    state = sharded_state(rank)
    dcp.save(state, storage_writer=FileSystemWriter(os.path.join(HERE, "torch_save_4ranks"), thread_count=1))
    state = sharded_state(rank)
    dcp.save(state, storage_writer=FileSystemWriter(os.path.join(HERE, "safetensors_4ranks"), thread_count=1,
                                                    serialization_format=SerializationFormat.SAFETENSORS))
    flat, _ = flatten_state_dict(state)
    gathered = {k: full(v) for k, v in flat.items()}  # collective: every rank gathers
    if rank == 0:
        write_ground_truth(gathered, os.path.join(HERE, "expected_4ranks.safetensors"),
                           os.path.join(HERE, "expected_4ranks.json"))
    dist.barrier()
    dist.destroy_process_group()


def small_state():
    g = torch.Generator().manual_seed(3)
    return {
        "f32": torch.randn(2, 3, generator=g),
        "bf16": torch.randn(3, generator=g).to(torch.bfloat16),
        "f16": torch.randn(2, 2, generator=g).to(torch.float16),
        "f64_scalar": torch.tensor(-1.25, dtype=torch.float64),
        "i64": torch.tensor([1, -2, 2**40, -(2**62)], dtype=torch.int64),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.arange(5, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "fp8": torch.tensor([0.5, -1.0, 448.0, 0.0]).to(torch.float8_e4m3fn),
        "count": 7,
        "meta": {"name": "small", "lr": 0.1, "betas": (0.9, 0.999), "flags": [True, False, None],
                 "big": 2**62, "neg": -5, "tiny": 1e-300, "empty": {}, "nested": [[], ()]},
        "blob": {"raw": b"ab\x00\xff", "mutable": bytearray(b"xy"), "ids": {1, 2}, "frozen": frozenset({3})},
        "holder": {"t": torch.arange(4, dtype=torch.int32), "n": 3, "pair": (torch.arange(3, dtype=torch.int16), 9)},
    }


def make_small():
    path = os.path.join(HERE, "small")
    state = small_state()
    dcp.save(state, storage_writer=FileSystemWriter(path, thread_count=1), no_dist=True)
    flat, _ = flatten_state_dict(small_state())
    write_ground_truth(flat, os.path.join(HERE, "expected_small.safetensors"),
                       os.path.join(HERE, "expected_small.json"))


def make_torch_save_files():
    d = os.path.join(HERE, "torch_save")
    os.makedirs(d)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    views = {
        "column_slice": base[:, 1:3],              # storage offset 1, stride (4, 1)
        "transposed": torch.arange(6, dtype=torch.int16).reshape(2, 3).t(),  # stride (1, 3)
        "row_offset": base[1],                     # contiguous at storage offset 4
        "fp8": torch.tensor([1.0, -0.5, 2.0]).to(torch.float8_e4m3fn),  # _rebuild_tensor_v3
        "scalar": torch.tensor(3.0),
    }
    for name, t in views.items():
        torch.save(t, os.path.join(d, name + ".pt"))
    objects = {"ints": [0, 1, 255, 256, 65535, 65536, -1, 2**31, -(2**63), 2**63 - 1],
               "floats": [0.0, -0.0, 1.5, 1e16, 1e-5, float("inf")], "text": "héllo\n'q'",
               "data": b"\x00\x01ab", "set": {5}, "tuple": (1,), "none": None, "empty": b""}
    torch.save(objects, os.path.join(d, "objects.pt"))
    torch.save({"too_big": 2**70}, os.path.join(d, "bigint.pt"))
    torch.save({"shared": [base, base[2]], "half": torch.tensor([1.5, -2.0], dtype=torch.float16)},
               os.path.join(d, "tensors_in_object.pt"))
    write_safetensors(os.path.join(HERE, "expected_torch_save.safetensors"), views)
    with open(os.path.join(HERE, "expected_torch_save.json"), "w") as f:
        json.dump({"objects.pt": repr(objects)}, f, indent=1)
        f.write("\n")


def dump_metadata(md, path):
    with open(path, "wb") as f:
        pickle.dump(md, f)


def make_broken():
    b = os.path.join(HERE, "broken")
    os.makedirs(b)
    small = os.path.join(HERE, "small")
    with open(os.path.join(small, ".metadata"), "rb") as f:
        raw = f.read()

    def copy_small(name):
        d = os.path.join(b, name)
        shutil.copytree(small, d)
        return d

    # A pickle calling os.system('true') (harmless if a Python unpickler ran it).
    os.makedirs(os.path.join(b, "forbidden_global"))
    evil = b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R."
    with open(os.path.join(b, "forbidden_global", ".metadata"), "wb") as f:
        f.write(evil)
    os.makedirs(os.path.join(b, "truncated_metadata"))
    with open(os.path.join(b, "truncated_metadata", ".metadata"), "wb") as f:
        f.write(raw[: len(raw) // 2])

    md = pickle.loads(raw)
    d = copy_small("escape_path")
    escaped = dict(md.storage_data)
    victim = next(k for k in escaped if k.fqn == "f32")
    escaped[victim] = type(escaped[victim])("../x", escaped[victim].offset, escaped[victim].length)
    md.storage_data = escaped
    dump_metadata(md, os.path.join(d, ".metadata"))

    d = copy_small("symlink_item")
    os.remove(os.path.join(d, "__0_0.distcp"))
    os.symlink("../../small/__0_0.distcp", os.path.join(d, "__0_0.distcp"))

    d = copy_small("crc_flip")
    md = pickle.loads(raw)
    info = next(v for k, v in md.storage_data.items() if k.fqn == "f32")
    with open(os.path.join(d, info.relative_path), "r+b") as f:
        f.seek(info.offset)
        item = f.read(info.length)
        z = zipfile.ZipFile(io.BytesIO(item))
        rec = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
        local = item[rec.header_offset:]
        data_at = rec.header_offset + 30 + struct.unpack("<H", local[26:28])[0] + struct.unpack("<H", local[28:30])[0]
        f.seek(info.offset + data_at + 5)
        byte = f.read(1)
        f.seek(info.offset + data_at + 5)
        f.write(bytes([byte[0] ^ 0x10]))

    # Metadata-only variants of the 4-rank checkpoint's coverage.
    with open(os.path.join(HERE, "torch_save_4ranks", ".metadata"), "rb") as f:
        four = f.read()
    ChunkStorageMetadata = type(pickle.loads(four).state_dict_metadata["extra.grid2d"].chunks[0])

    def variant(name, edit):
        md = pickle.loads(four)
        edit(md)
        dump_metadata(md, os.path.join(b, name + ".metadata"))

    def drop_chunk(md):  # grid2d loses its chunk at (2, 3): a 2x3 gap
        t = md.state_dict_metadata["extra.grid2d"]
        t.chunks = [c for c in t.chunks if tuple(c.offsets) != (2, 3)]

    def overlap(md):  # rows_i64's chunk at row 2 moved to row 1: rows 1-2 overlap, row 3 uncovered
        t = md.state_dict_metadata["extra.rows_i64"]
        c = next(c for c in t.chunks if tuple(c.offsets) == (2, 0))
        c.offsets = torch.Size([1, 0])

    def arity(md):  # Megatron's prepend-axis bug: offsets with one more entry than sizes
        t = md.state_dict_metadata["extra.rows_i64"]
        t.chunks[0].offsets = torch.Size([0] + list(t.chunks[0].offsets))

    def past_end(md):  # a padding chunk 64 elements past the end of a 1-D tensor
        t = md.state_dict_metadata["model.0.bias"]
        t.chunks.append(ChunkStorageMetadata(offsets=torch.Size([8]), sizes=torch.Size([64])))

    def no_storage(md):  # grid3d's first chunk has no storage_data entry
        t = md.state_dict_metadata["extra.grid3d"]
        first = tuple(t.chunks[0].offsets)
        md.storage_data = {k: v for k, v in md.storage_data.items()
                           if not (k.fqn == "extra.grid3d" and tuple(k.offset) == first)}

    variant("chunk_gap", drop_chunk)
    variant("overlap", overlap)
    variant("arity", arity)
    variant("past_end", past_end)
    variant("no_storage", no_storage)


def main():
    for name in ["torch_save_4ranks", "safetensors_4ranks", "small", "torch_save", "broken"]:
        shutil.rmtree(os.path.join(HERE, name), ignore_errors=True)
    mp.spawn(sharded_worker, args=(29600 + os.getpid() % 1000,), nprocs=WORLD)
    make_small()
    make_torch_save_files()
    make_broken()
    total = 0
    for root, _, files in os.walk(HERE):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    print(f"torch {torch.__version__}: fixtures written, {total} bytes in testdata/dcp")


if __name__ == "__main__":
    sys.exit(main())
