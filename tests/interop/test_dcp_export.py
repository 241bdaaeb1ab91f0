#!/usr/bin/env python3
"""`fpgather convert` of real Megatron-Core torch_dist checkpoints (testdata/megatron) read by the official
`safetensors` package and compared byte for byte with the ground truth the generator took from
Megatron's optimizer (truth.safetensors): with --dtype fp32 --states every NAME.master and NAME.<state>,
with --dtype bf16 every weight. The ground truth is read through the safetensors header alone, so bf16
needs no framework. Exit 77 (skip) without the modules."""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    from safetensors import safe_open
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


def raw_tensors(path):
    """{name: (dtype, shape, bytes)} from a safetensors file, by its documented layout."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


with tempfile.TemporaryDirectory() as tmp:
    for case in sorted(os.listdir(os.path.join(TESTDATA, "megatron"))):
        ckpt = os.path.join(TESTDATA, "megatron", case, "ckpt")
        if not os.path.isdir(ckpt):
            continue
        truth = raw_tensors(os.path.join(TESTDATA, "megatron", case, "truth.safetensors"))
        for dtype, states in (("fp32", True), ("bf16", False)):
            out = os.path.join(tmp, f"{case}-{dtype}.safetensors")
            subprocess.run([FPGATHER, "--no-progress", "convert", ckpt, out, "--dtype", dtype]
                           + (["--states"] if states else []), check=True, stdout=subprocess.DEVNULL)
            with safe_open(out, framework="numpy") as f:  # the official reader accepts the file
                names = set(f.keys())
            got = raw_tensors(out)
            check(names == set(got), f"{out}: safetensors lists the header's tensors")
            for name, (dt, shape, data) in got.items():
                if "." in name and name.rsplit(".", 1)[1] in ("master", "exp_avg", "exp_avg_sq", "momentum_buffer"):
                    want = truth.get(name)
                elif dtype == "bf16":
                    want = truth.get(name)
                    if want and want[0] == "F32":  # fp32 params (norms) export rounded to bf16: skip
                        continue
                else:
                    want = truth.get(name + ".master") or truth.get(name)
                check(want is not None, f"{case}: {name} has a ground truth")
                if want:
                    check((dt, shape) == (want[0], want[1]), f"{case}: {name} {dt}{shape} vs {want[0]}{want[1]}")
                    check(data == want[2], f"{case}: {name} ({dtype}) bytes equal the ground truth")
            print(f"{case} {dtype}: {len(got)} tensors compared")

if failures:
    print(f"{failures} check(s) failed")
    sys.exit(1)
print("all checks passed")
