#!/usr/bin/env python3
"""Interop: DCP checkpoints written by formats/dcp's writer (through tests/tools/make_dcp) load in
PyTorch, bit for bit.

- A synthetic checkpoint (tensors of several dtypes and shapes split over three ranks, plain Python
  objects as bytes items, an item carried over unchanged from a Megatron checkpoint) is loaded with
  torch.distributed.checkpoint.load and compared bitwise with the pattern make_dcp writes; every
  item is also loaded alone with torch.load(weights_only=True), and each tensor item must be the very
  bytes torch.save writes for that chunk. format_utils.dcp_to_torch_save must read it too.
- Each committed Megatron-Core checkpoint (testdata/megatron/*/ckpt) and the torch-written ones of
  testdata/dcp, rewritten by the writer (items copied, and objects decoded and pickled again), must load
  to the same values as the original; the Megatron ones, where megatron.core is importable, through
  Megatron's own dist_checkpointing loaders as well.

Run by ctest with MAKE_DCP (the tool) and TESTDATA set; exits 77 (skipped) without torch.
"""
import io
import math
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import warnings

try:
    import numpy as np
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e}")
    sys.exit(77)

warnings.filterwarnings("ignore", message="torch.distributed is disabled")
MAKE_DCP = os.environ["MAKE_DCP"]
TESTDATA = os.environ.get("TESTDATA", os.path.join(os.path.dirname(__file__), "..", "..", "testdata"))
MEGATRON = os.path.join(TESTDATA, "megatron")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def make_dcp(*args):
    subprocess.run([MAKE_DCP, *args], check=True)


def same(a, b):
    """Deep equality that also tells -0.0 from 0.0, int from float and tuple from list."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and tensor_bytes(a) == tensor_bytes(b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b


def tensor_bytes(t):
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def empty_state_dict(md):
    """A state dict to load every key of a checkpoint into: tensors of the stored dtype and size,
    bytes items as placeholders (DCP replaces them with the loaded objects)."""
    sd = {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, TensorStorageMetadata):
            sd[k] = torch.empty(v.size, dtype=v.properties.dtype)
        else:
            sd[k] = io.BytesIO()
    return sd


def load_all(path):
    md = FileSystemReader(path).read_metadata()
    sd = empty_state_dict(md)
    dcp.load(sd, checkpoint_id=path)
    return md, sd


def items(path, md):
    """(MetadataIndex, raw item bytes) of every storage entry."""
    for index, info in md.storage_data.items():
        with open(os.path.join(path, info.relative_path), "rb") as f:
            f.seek(info.offset)
            yield index, f.read(info.length)


# ---- the synthetic checkpoint ----------------------------------------------------------------------

TENSORS = [  # as make_dcp synth writes them: (fqn, dtype, shape)
    ("model.embedding.weight", torch.bfloat16, [10, 8]),
    ("model.norm", torch.float32, [8]),
    ("optim.exp_avg", torch.float32, [6, 9]),
    ("scalar.step", torch.float64, []),
    ("empty", torch.float32, [0, 4]),
    ("fp8.weight", torch.float8_e4m3fn, [4, 4]),
    ("u16", torch.uint16, [3]),
    ("i64", torch.int64, [5]),
    ("big", torch.uint8, [70000]),
]


def pattern_tensor(k, dtype, shape):
    n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    i = np.arange(n, dtype=np.uint64)
    b = ((k * 131 + i * 17 + (i >> 8)) & 0xFF).astype(np.uint8)
    return torch.from_numpy(b.copy()).view(dtype).reshape(shape)


def expected_objects():
    def group(lr):
        return {"lr": lr, "betas": (0.9, 0.95), "eps": 1e-08, "amsgrad": False, "maximize": True,
                "foreach": None, "step": 3.0, "params": [0, 1, 2]}

    extra = {
        "ints": [0, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, -2**31 - 1, 2**63 - 1, -2**63],
        "floats": [-0.0, 1e300, -2.5e-310],
        "name": "h\u00e9llo \u2192 \u00fc",
        "blob": b"\x00\xff\x80ab",
        "empty_bytes": b"",
        "t0": (),
        "t4": (1, 2, 3, 4),
        "nested": {"a": [], "b": {}},
        7: "int key",
    }
    return {
        "param_groups": [group(0.001), group(-0.0), extra],
        "per_bucket_numel": [{(torch.bfloat16, torch.float32): [24576, 100]}, {(torch.float32, torch.float32): [384]}],
        "long_list": list(range(2500)),
        "long_dict": {str(k): k for k in range(1001)},
        "set": {1, 2, 3},
    }


def fixture_item(name, fqn):
    """(file, offset, length) of bytes item `fqn` in a committed Megatron checkpoint."""
    path = os.path.join(MEGATRON, name, "ckpt")
    md = FileSystemReader(path).read_metadata()
    for index, info in md.storage_data.items():
        if index.fqn == fqn:
            return os.path.join(path, info.relative_path), info.offset, info.length
    raise KeyError(fqn)


def test_synthetic(tmp):
    out = os.path.join(tmp, "synth")
    carry = fixture_item("dp1-one-bucket", "common_state/shard_0_1")
    make_dcp("synth", out, "--block-bytes", "4096", "--carry", carry[0], str(carry[1]), str(carry[2]))
    md, sd = load_all(out)

    check(md.version == "1.0.0", f"version {md.version}")
    check(md.storage_meta.checkpoint_id == out, f"checkpoint_id {md.storage_meta.checkpoint_id}")
    check(sorted(os.listdir(out)) == [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp"],
          f"files {sorted(os.listdir(out))}")
    keys = [t[0] for t in TENSORS] + ["param_groups", "per_bucket_numel", "long_list", "long_dict", "set", "carried"]
    check(list(md.state_dict_metadata) == keys, f"key order {list(md.state_dict_metadata)}")
    check(md.planner_data == {k: (k,) for k in keys}, "planner_data {fqn: (fqn,)}")

    for k, (fqn, dtype, shape) in enumerate(TENSORS):
        want = pattern_tensor(k, dtype, shape)
        got = sd[fqn]
        check(got.dtype == dtype and list(got.shape) == shape, f"{fqn}: {got.dtype} {list(got.shape)}")
        check(tensor_bytes(got) == tensor_bytes(want), f"{fqn}: values differ from the pattern")

    want_objects = expected_objects()
    for fqn, want in want_objects.items():
        check(same(sd[fqn], want), f"{fqn}: loaded {sd[fqn]!r:.200}")
    with open(carry[0], "rb") as f:
        f.seek(carry[1])
        carried = f.read(carry[2])
    check(same(sd["carried"], torch.load(io.BytesIO(carried), weights_only=True)), "carried item")

    # Every item on its own, as DCP's reader sees it.
    byte_identical_objects = []
    for index, raw in items(out, md):
        if index.offset is not None:  # a tensor chunk
            k = [t[0] for t in TENSORS].index(index.fqn)
            chunk = next(c for c in md.state_dict_metadata[index.fqn].chunks if c.offsets == index.offset)
            full = pattern_tensor(k, *TENSORS[k][1:])
            box = full[tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes))].clone()
            got = torch.load(io.BytesIO(raw), weights_only=True)
            check(same(got, box), f"{index.fqn} chunk {tuple(chunk.offsets)}: torch.load differs")
            ref = io.BytesIO()
            torch.save(box, ref)
            check(raw == ref.getvalue(), f"{index.fqn} chunk {tuple(chunk.offsets)}: not torch.save's bytes")
        elif index.fqn == "carried":
            check(raw == carried, "carried item: bytes changed")
        else:
            want = want_objects[index.fqn]
            check(same(torch.load(io.BytesIO(raw), weights_only=index.fqn != "set"), want),
                  f"{index.fqn}: torch.load differs")
            ref = io.BytesIO()
            torch.save(want, ref)
            if raw == ref.getvalue():
                byte_identical_objects.append(index.fqn)
    print("objects byte-identical to torch.save:", ", ".join(byte_identical_objects))

    # The plain pickle reader sees torch's own classes.
    with open(os.path.join(out, ".metadata"), "rb") as f:
        raw_md = pickle.load(f)
    check(type(raw_md).__name__ == "Metadata" and raw_md.storage_meta.load_id is None, "plain pickle.load")

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    flat = os.path.join(tmp, "synth.pt")
    dcp_to_torch_save(out, flat)
    whole = torch.load(flat, weights_only=False)
    check(all(same(whole[t[0]], sd[t[0]]) for t in TENSORS), "dcp_to_torch_save tensors")
    check(same(whole["per_bucket_numel"], want_objects["per_bucket_numel"]), "dcp_to_torch_save objects")
    print(f"synthetic: {len(md.storage_data)} items in {len(keys)} keys loaded")

    mega = os.path.join(tmp, "synth-megatron")
    make_dcp("synth", mega, "--megatron")
    with open(os.path.join(mega, "metadata.json")) as f:
        text = f.read()
    check(text == '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}', f"metadata.json {text!r}")
    md2, sd2 = load_all(mega)
    check(md2.planner_data is None, "Megatron flavour: planner_data None")
    check(all(same(sd2[t[0]], sd[t[0]]) for t in TENSORS), "Megatron flavour: same tensors")


# ---- Megatron checkpoints rewritten ----------------------------------------------------------------

def megatron_loaders():
    """Megatron-Core's loaders: its common state, and dist_checkpointing.load of every key (each tensor
    as one ShardedTensor of its global shape, each bytes key as its ShardedObject), the path a
    training job's resume takes."""
    try:
        from megatron.core.dist_checkpointing import ShardedTensor, load
        from megatron.core.dist_checkpointing.mapping import ShardedObject
        from megatron.core.dist_checkpointing.serialization import load_common_state_dict
    except Exception as e:  # ImportError, or a dependency megatron.core needs
        print(f"note: megatron.core not importable ({type(e).__name__}: {e}); its loaders are not tried")
        return []

    def dist_checkpointing_load(path):
        sharded = {}
        for k, v in FileSystemReader(path).read_metadata().state_dict_metadata.items():
            if isinstance(v, TensorStorageMetadata):
                sharded[k] = ShardedTensor.from_rank_offsets(k, torch.empty(v.size, dtype=v.properties.dtype))
            elif not k.startswith("common_state/"):  # load() reads the common state itself
                o = ShardedObject.empty_from_unique_key(k)
                sharded[o.unique_key] = o
        return load(sharded, path, validate_access_integrity=False)

    return [load_common_state_dict, dist_checkpointing_load]


def test_rewrites(tmp):
    loaders = megatron_loaders()
    if loaders and not torch.distributed.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    sources = [(n, os.path.join(MEGATRON, n, "ckpt")) for n in sorted(os.listdir(MEGATRON))]
    sources += [(n, os.path.join(TESTDATA, "dcp", n)) for n in ("torch_save_4ranks", "small")]
    for name, src in sources:
        if not os.path.isdir(src):
            continue
        megatron = os.path.exists(os.path.join(src, "metadata.json"))
        src_md, src_sd = load_all(src)
        for mode in ("items", "objects"):
            out = os.path.join(tmp, f"{name}-{mode}")
            make_dcp("copy", src, out, *(["--objects"] if mode == "objects" else []))
            md, sd = load_all(out)
            check(list(md.state_dict_metadata) == list(src_md.state_dict_metadata), f"{name} {mode}: key order")
            for k, v in src_md.state_dict_metadata.items():
                if isinstance(v, TensorStorageMetadata):
                    w = md.state_dict_metadata[k]
                    check([(c.offsets, c.sizes) for c in w.chunks] == [(c.offsets, c.sizes) for c in v.chunks],
                          f"{name} {mode}: {k} chunks")
                check(same(sd[k], src_sd[k]), f"{name} {mode}: {k} differs after the rewrite")
            if megatron:
                with open(os.path.join(src, "metadata.json")) as a, open(os.path.join(out, "metadata.json")) as b:
                    check(a.read() == b.read(), f"{name} {mode}: metadata.json")
            else:
                check(not os.path.exists(os.path.join(out, "metadata.json")), f"{name} {mode}: no metadata.json")
            src_items = dict(items(src, src_md))
            identical = sum(raw == src_items[index] for index, raw in items(out, md))
            if mode == "items":
                check(identical == len(src_items), f"{name} items: {identical} of {len(src_items)} items identical")
            print(f"{name} {mode}: {len(md.storage_data)} items load equal; {identical} byte-identical to the source's")
            for loader in (loaders if megatron else []):
                # Megatron's loader must read ours wherever it reads Megatron's own checkpoint.
                try:
                    want = loader(src)
                except Exception as e:
                    print(f"note: {loader.__name__} fails on the original {name} here too ({type(e).__name__}: {e})")
                    continue
                got = loader(out)
                check(same(got, want), f"{name} {mode}: Megatron's {loader.__name__} differs")
                print(f"{name} {mode}: Megatron's {loader.__name__} loads it equal")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_synthetic(tmp)
        test_rewrites(tmp)
    if failures:
        print(f"{failures} failure(s)")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
