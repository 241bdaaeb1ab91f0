#!/usr/bin/env python3
"""`fpgather convert CKPT OUT.safetensors` read by the official `safetensors` package, compared with an
independent read of the checkpoint through h5py alone (index tables and datasets as man 5
fpgather-format documents them; the fixture is written with --compress none so no HDF5 plugin is
needed): fp32 weights = the masters, NAME.master/NAME.exp_avg/NAME.exp_avg_sq = the optimizer keys,
bf16 weights = the checkpoint's weight/ keys, byte for byte. Exit 77 (skip) without the modules."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import h5py
    from safetensors import safe_open
    from safetensors.numpy import load_file
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

FPGATHER = os.environ.get("FPGATHER", "fpgather")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def run(*args):
    subprocess.run([FPGATHER, "--no-progress", *args], check=True, stdout=subprocess.DEVNULL)


def read_checkpoint(ckpt):
    """{key: bytes of its whole extent} (padding as zeros) and the documents, through h5py only."""
    with h5py.File(os.path.join(ckpt, "index.h5"), "r") as ix:
        names = ix["names"][()].tobytes()
        keys = ix["keys"][()]
        shapes = ix["shapes"][()]
        files = ix["files"][()]
        runs = ix["runs"][()]
        docs = {k: json.loads(ix["documents"][k][()]) for k in ix["documents"]}
    key_names = [names[k["name_off"]:k["name_off"] + k["name_len"]].decode() for k in keys]
    file_names = [names[f["name_off"]:f["name_off"] + f["name_len"]].decode() for f in files]
    elem = {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 13: 2, 14: 2, 17: 4}
    out = {}
    for i, k in enumerate(keys):
        numel = int(np.prod(shapes[k["shape_off"]:k["shape_off"] + k["ndim"]])) if k["ndim"] else 1
        out[key_names[i]] = bytearray(numel * elem[int(k["dtype"])])
    for r in runs:
        with h5py.File(os.path.join(ckpt, file_names[r["file"]]), "r") as f:
            data = f[str(r["dataset"])][()].tobytes()
        name = key_names[r["key"]]
        e = elem[int(keys[r["key"]]["dtype"])]
        out[name][int(r["lo"]) * e:int(r["lo"]) * e + len(data)] = data
    return {k: bytes(v) for k, v in out.items()}, docs


with tempfile.TemporaryDirectory() as tmp:
    ck = os.path.join(tmp, "ck")
    run("train", "--steps", "3", "--dp", "2", "--save", ck, "--compress", "none", "--ckpt-layout", "model")
    step = os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())
    st32 = os.path.join(tmp, "w32.safetensors")
    st16 = os.path.join(tmp, "w16.safetensors")
    run("convert", ck, st32, "--dtype", "fp32", "--states")
    run("convert", ck, st16)
    keys, docs = read_checkpoint(step)
    params = [p["name"] for p in docs["model"]["params"]]
    states = docs["optimizer"]["states"]
    check(states[0] == "master" and "exp_avg_sq" in states, f"states {states}")

    t32 = load_file(st32)
    with safe_open(st32, framework="np") as f:
        meta = f.metadata()
    check(meta.get("fpgather.weights") == "fp32" and meta.get("fpgather.step") == "3", f"metadata {meta}")
    check(len(t32) == len(params) * (1 + len(states)), f"{len(t32)} tensors")
    for p in params:
        master = keys[f"optimizer/{p}/master"]
        check(t32[p].dtype == np.float32 and t32[p].tobytes() == master, f"{p}: fp32 weight = master")
        for s in states:
            check(t32[f"{p}.{s}"].tobytes() == keys[f"optimizer/{p}/{s}"], f"{p}.{s}")
    # bf16 export: the checkpoint's weight/ keys as held (safetensors' numpy backend has no bf16:
    # read the raw bytes through the header the package parsed).
    with safe_open(st16, framework="np") as f:
        names16 = set(f.keys())
    check(names16 == set(params), "bf16 export holds exactly the params")
    with open(st16, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
        base = 8 + n
        for p in params:
            h = header[p]
            fh.seek(base + h["data_offsets"][0])
            raw = fh.read(h["data_offsets"][1] - h["data_offsets"][0])
            check(h["dtype"] == "BF16" and raw == keys[f"weight/{p}"], f"{p}: bf16 weight = weight/{p}")
            m = np.frombuffer(keys[f"optimizer/{p}/master"], dtype="<u4")
            # bf16 = round-to-nearest-even of the master (finite values)
            rne = ((m + 0x7FFF + ((m >> 16) & 1)) >> 16).astype("<u2")
            check(rne.tobytes() == raw, f"{p}: bf16 weight = RNE(master)")

if failures:
    print(f"{failures} check(s) failed")
    sys.exit(1)
print("all checks passed")
