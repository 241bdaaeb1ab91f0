#!/usr/bin/env python3
"""`fpgather convert CKPT OUT --to dcp` loaded by torch.distributed.checkpoint.load into a nested state dict
{"model": {NAME: t}, "optimizer": {"state": {NAME: {STATE: t}}}} and compared bitwise with the same export
as safetensors read by safetensors.torch: an fpgather checkpoint and a Megatron torch_dist one, bf16 and
fp32 weights. Needs torch; exit 77 (skip) without it (CI has no torch: run it with a Python that has it)."""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

FPGATHER = os.environ.get("FPGATHER", "fpgather")
TESTDATA = os.environ["TESTDATA"]
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def export(ckpt, out, *args):
    subprocess.run([FPGATHER, "--no-progress", "convert", ckpt, out, "--states", *args], check=True,
                   stdout=subprocess.DEVNULL)


cases = [os.path.join(TESTDATA, "ckpt", "valid", "dp2-bucket"),
         os.path.join(TESTDATA, "megatron", "dp1-buckets-padded", "ckpt")]
with tempfile.TemporaryDirectory() as tmp:
    for n, ckpt in enumerate(cases):
        for dtype in ("bf16", "fp32"):
            out = os.path.join(tmp, f"{n}-{dtype}.dcp")
            export(ckpt, out, "--to", "dcp", "--dtype", dtype)
            export(ckpt, out + ".safetensors", "--dtype", dtype)
            want = load_file(out + ".safetensors")
            md = FileSystemReader(out).read_metadata()
            sd = {"model": {}, "optimizer": {"state": {}}}
            for fqn, m in md.state_dict_metadata.items():
                empty = torch.empty(m.size, dtype=m.properties.dtype)
                if fqn.startswith("model."):
                    sd["model"][fqn[len("model."):]] = empty
                else:
                    name, state = fqn[len("optimizer.state."):].rsplit(".", 1)
                    sd["optimizer"]["state"].setdefault(name, {})[state] = empty
            dcp.load(sd, checkpoint_id=out)
            got = dict(sd["model"])
            for name, states in sd["optimizer"]["state"].items():
                for state, t in states.items():
                    got[f"{name}.{state}"] = t
            check(set(got) == set(want), f"{out}: the DCP holds the safetensors export's tensors")
            for k, t in want.items():
                if k in got:
                    check(got[k].dtype == t.dtype and got[k].shape == t.shape and
                          torch.equal(got[k].view(-1).view(torch.uint8), t.view(-1).view(torch.uint8)),
                          f"{out}: {k} bitwise")
            print(f"{ckpt} {dtype}: {len(got)} tensors loaded by torch.distributed.checkpoint")

if failures:
    print(f"{failures} check(s) failed")
    sys.exit(1)
print("all checks passed")
