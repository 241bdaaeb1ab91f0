#!/usr/bin/env python3
"""Interop with the official safetensors library (exit 77 = skipped when it is not installed).

Checks the test files the C++ tests rely on against the official reader:
  - testdata/safetensors/reference_*.safetensors and sharded/ load with safetensors.numpy and match
    reference_manifest.json (names, dtypes, shapes, bytes, metadata);
  - every file in testdata/safetensors/bad/ is refused by the official reader, except those the
    manifest marks "reference_accepts" (where fpgather is deliberately stricter).
The check that the official reader opens files fpgather *writes* comes with `fpgather convert`.
"""
import json
import os
import sys

try:
    import ml_dtypes  # noqa: F401  (registers bf16/fp8 with numpy)
    import numpy  # noqa: F401
    from safetensors import deserialize, safe_open
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

TESTDATA = os.environ.get("TESTDATA") or os.path.join(os.path.dirname(__file__), "..", "..", "testdata")
DIR = os.path.join(TESTDATA, "safetensors")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def main():
    with open(os.path.join(DIR, "reference_manifest.json")) as f:
        manifest = json.load(f)
    for file, want in manifest.items():
        path = os.path.join(DIR, file)
        with open(path, "rb") as f:
            loaded = dict(deserialize(f.read()))
        with safe_open(path, framework="numpy") as f:
            check((f.metadata() or None) == want["metadata"], f"{file}: metadata")
        check(sorted(loaded) == sorted(t["name"] for t in want["tensors"]), f"{file}: tensor names")
        for t in want["tensors"]:
            got = loaded.get(t["name"])
            if got is None:
                continue
            check(got["dtype"] == t["dtype"], f"{file}: {t['name']}: dtype")
            check(list(got["shape"]) == t["shape"], f"{file}: {t['name']}: shape")
            check(bytes(got["data"]).hex() == t["hex"], f"{file}: {t['name']}: bytes")

    with open(os.path.join(DIR, "sharded", "model.safetensors.index.json")) as f:
        index = json.load(f)
    total = 0
    for name, shard in index["weight_map"].items():
        with safe_open(os.path.join(DIR, "sharded", shard), framework="numpy") as f:
            check(name in f.keys(), f"sharded: {name} not in {shard}")
            total += f.get_tensor(name).nbytes
    check(total == index["metadata"]["total_size"], "sharded: total_size")

    with open(os.path.join(DIR, "bad", "manifest.json")) as f:
        bad = json.load(f)
    for file, info in bad.items():
        with open(os.path.join(DIR, "bad", file), "rb") as f:
            data = f.read()
        try:
            deserialize(data)
            accepted = True
        except Exception:  # the library raises several types
            accepted = False
        check(accepted == info["reference_accepts"],
              f"bad/{file}: official reader {'accepts' if accepted else 'refuses'} it, manifest says otherwise")

    for f in failures:
        print("FAIL:", f)
    print(f"{len(manifest)} reference files, {len(bad)} bad files checked; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
