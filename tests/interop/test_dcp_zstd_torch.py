#!/usr/bin/env python3
"""What fpgather reads of the layouts torch 2.15 writes beyond a plain DCP, against torch's own load:
the ZStandard-compressed checkpoint (testdata/dcp/zstd) loaded by torch.distributed.checkpoint.load and
the Hugging Face distributed shards (testdata/dcp/hf_distributed) by HuggingFaceStorageReader, each
compared bitwise with `fpgather convert --states --dtype fp32` of the same directory read by
safetensors.torch; and the packed float4 pairs' F4 export (testdata/dcp/nvfp4) loaded by
safetensors.torch as torch.float4_e2m1fn_x2 equal to what dcp.load reads. Needs torch, zstandard and
safetensors; exit 77 (skip) without them (CI has no torch: run it with a Python that has them)."""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed.checkpoint as dcp
    import zstandard  # noqa: F401  (torch's ZStandard extension reads through it)
    from safetensors import safe_open
    from safetensors.torch import load_file
    from torch.distributed.checkpoint import FileSystemReader, HuggingFaceStorageReader
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

FPGATHER = os.environ.get("FPGATHER", "fpgather")
D = os.path.join(os.environ["TESTDATA"], "dcp")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                      b.reshape(-1).view(torch.uint8))


def torch_load(path, reader):
    """Every tensor key of the checkpoint, loaded by dcp.load into tensors of the metadata's shapes."""
    md = reader.read_metadata()
    state = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
             if hasattr(v, "size")}
    dcp.load(state, storage_reader=reader, no_dist=True)
    return state


with tempfile.TemporaryDirectory() as tmp:
    for name, reader in [("zstd", FileSystemReader(os.path.join(D, "zstd"))),
                         ("hf_distributed", HuggingFaceStorageReader(os.path.join(D, "hf_distributed")))]:
        want = torch_load(os.path.join(D, name), reader)
        out = os.path.join(tmp, name + ".safetensors")
        subprocess.run([FPGATHER, "--no-progress", "convert", os.path.join(D, name), out, "--states", "--dtype", "fp32"],
                       check=True, stdout=subprocess.DEVNULL)
        got = load_file(out)
        # Export names: the parameter for a weight ("model." dropped), NAME.STATE for its states.
        for key, t in want.items():
            k = key[len("model."):] if key.startswith("model.") else key
            if k.startswith("optim.state.") and not k.endswith(".step"):
                k = k[len("optim.state."):]
            t32 = t.float() if t.is_floating_point() and t.dtype != torch.float32 and k in got and got[k].dtype == torch.float32 else t
            check(k in got and same(got[k], t32), f"{name}: {key} as {k}")
        print(f"{name}: {len(want)} tensors equal to torch's load")

    out = os.path.join(tmp, "nvfp4.safetensors")
    subprocess.run([FPGATHER, "--no-progress", "convert", os.path.join(D, "nvfp4"), out, "--dtype", "fp32"],
                   check=True, stdout=subprocess.DEVNULL)
    want = torch_load(os.path.join(D, "nvfp4"), FileSystemReader(os.path.join(D, "nvfp4")))
    with safe_open(out, framework="pt") as f:
        check(f.get_slice("nvfp4.packed").get_dtype() == "F4" and f.get_slice("nvfp4.packed").get_shape() == [3, 4],
              "nvfp4: F4 [3, 4]")
        check(same(f.get_tensor("nvfp4.packed"), want["nvfp4.packed"]), "nvfp4: the pairs as torch loads them")
    print("nvfp4: float4_e2m1fn_x2 exported as F4, loaded back by safetensors")

if failures:
    print(f"{failures} check(s) failed")
    sys.exit(1)
print("all checks passed")
