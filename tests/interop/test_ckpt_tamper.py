#!/usr/bin/env python3
"""An index edited with h5py, as a user or a tool might: the names of exp_avg and exp_avg_sq swapped in
/keys, or the data cursor changed in /documents/data. The index checksum notices on every open:
`validate` reports it (exit 1), `train --load` and `diff` refuse the checkpoint (exit 1), and
`inspect` shows it altered. (A resealed index with swapped names is caught by the chunk checksums,
bound to their key: tests/cli/validate.sh, fixture broken/swapped-keys.) Exit 77 (skip) without h5py."""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import h5py
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

FPGATHER = os.environ["FPGATHER"]
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def fpgather(*args):
    p = subprocess.run([FPGATHER, "--no-progress", *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def swap_moments(index):
    with h5py.File(index, "r+") as ix:
        names = ix["names"][()].tobytes()
        keys = ix["keys"][()]
        name = [names[k["name_off"]:k["name_off"] + k["name_len"]].decode() for k in keys]
        a = name.index("optimizer/blocks.0.fc1.weight/exp_avg")
        b = name.index("optimizer/blocks.0.fc1.weight/exp_avg_sq")
        for f in ("name_off", "name_len"):
            keys[f][a], keys[f][b] = keys[f][b], keys[f][a]
        ix["keys"][...] = keys


def edit_cursor(index):
    with h5py.File(index, "r+") as ix:
        doc = ix["documents"]["data"][()]
        doc = doc.decode() if isinstance(doc, bytes) else doc
        check('"next_step":4' in doc, "the data cursor is at step 4")
        new = doc.replace('"next_step":4', '"next_step":3').encode()
        del ix["documents"]["data"]
        ix["documents"].create_dataset("data", data=new, dtype=h5py.string_dtype("utf-8", len(new)))


work = tempfile.mkdtemp(prefix="fpg-tamper-")
try:
    base = os.path.join(work, "base")
    code, out = fpgather("train", "--steps", "4", "--save", base)
    check(code == 0, "train: " + out)
    for name, edit in (("swapped", swap_moments), ("cursor", edit_cursor)):
        root = os.path.join(work, name)
        shutil.copytree(base, root)
        edit(os.path.join(root, "step-00000004", "index.h5"))
        code, out = fpgather("validate", root)
        check(code == 1 and "index_checksum - [0, 0) index.h5: the index was changed after it was written" in out,
              f"{name}: validate: {code} {out}")
        code, out = fpgather("train", "--steps", "6", "--load", root, "--save", root)
        check(code == 1 and "refusing to resume from it" in out and "index_checksum" in out,
              f"{name}: train --load: {code} {out}")
        check(not os.path.exists(os.path.join(root, "step-00000006")), f"{name}: a run resumed and saved")
        code, out = fpgather("diff", base, root)
        check(code == 1 and "refusing to compare it" in out, f"{name}: diff: {code} {out}")
        code, out = fpgather("inspect", root)
        check(code == 0 and "INDEX ALTERED" in out, f"{name}: inspect: {code} {out}")
finally:
    shutil.rmtree(work)
if failures:
    sys.exit(1)
print("ckpt tamper: all checks passed")
