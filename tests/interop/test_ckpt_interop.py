#!/usr/bin/env python3
"""Interop of the fpgather checkpoint format with h5py: the index and data files open in h5py; the
tables read as documented (man 5 fpgather-format); with hdf5plugin, h5py decodes our zstd (+shuffle)
datasets through the registered filter 32015 and the bytes equal what `fpgather diff`/the index say
(logical XXH3 is not available in Python, so every chunk is compared against the uncompressed copy of
the same state written with --compress none). Exit 77 (skip) without h5py or hdf5plugin."""
import os
import sys

try:
    import numpy as np
    import h5py
    import hdf5plugin  # noqa: F401  registers filter 32015
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

TESTDATA = os.environ.get("TESTDATA", os.path.join(os.path.dirname(__file__), "..", "..", "testdata"))
CK = os.path.join(TESTDATA, "ckpt")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def load(ckpt):
    """Every key's data as {name: {lo: array}}, read through h5py only (the format as documented)."""
    with h5py.File(os.path.join(ckpt, "index.h5"), "r") as ix:
        check(ix.attrs["format"] in (b"fpgather checkpoint", "fpgather checkpoint"), "format attribute")
        major = list(ix.attrs["format_version"])[0]
        check(major in (1, 2), "major version 1 or 2")
        check((major >= 2) == ("index_checksum" in ix.attrs), "index_checksum from format 2 on")
        names = ix["names"][()].tobytes()
        keys = ix["keys"][()]
        files = ix["files"][()]
        runs = ix["runs"][()]
        chunks = ix["chunks"][()]
        check(ix["chunks"].dtype.itemsize == 40, "40-byte chunk records")
        docs = {k: ix["documents"][k][()] for k in ix["documents"]}
        check("layout" in docs and "optimizer" in docs, "documents present")
    key_names = [names[k["name_off"]:k["name_off"] + k["name_len"]].decode() for k in keys]
    file_names = [names[f["name_off"]:f["name_off"] + f["name_len"]].decode() for f in files]
    out = {}
    handles = {}
    for r in runs:
        fname = file_names[r["file"]]
        if fname not in handles:
            handles[fname] = h5py.File(os.path.join(ckpt, fname), "r")
        ds = handles[fname][str(r["dataset"])]
        check(ds.shape == (r["numel"],), f"{fname}/{r['dataset']} extent")
        key_attr = ds.attrs["key"]
        key_attr = key_attr.decode() if isinstance(key_attr, bytes) else str(key_attr)
        check(key_attr == key_names[r["key"]], "dataset key attribute")
        out.setdefault(key_names[r["key"]], {})[int(r["lo"])] = ds[()].tobytes()  # decoded by h5py's filter pipeline
    for h in handles.values():
        h.close()
    check(len(chunks) > 0, "chunks present")
    load.zstd_chunks = int(((chunks["flags"] & 1) != 0).sum())
    # Chunks stored raw inside a zstd dataset (they would not shrink by 5%): HDF5 skips the filters
    # by the chunk's filter mask.
    load.raw_in_zstd = int((((runs["filters"][chunks["run"]] & 1) != 0) & ((chunks["flags"] & 1) == 0)).sum())
    return out


def flat(d):
    return {k: b"".join(v[lo] for lo in sorted(v)) for k, v in d.items()}


# Same state, same layout: zstd:1+shuffle (golden) vs zstd:1 (run/step-*) vs; compressed vs none in model layout.
golden = sorted(p for p in os.listdir(CK) if p.startswith("golden-v"))[-1]
a = flat(load(os.path.join(CK, golden)))
b = flat(load(os.path.join(CK, "valid", "run", "step-00000007")))
check(load.zstd_chunks > 0, "the golden checkpoint has zstd-compressed chunks")
check(load.raw_in_zstd > 0, "raw chunks inside zstd datasets (h5py decoded them above through the filter mask)")
check(a == b, "golden (zstd+shuffle) decodes to the same bytes as a second save")
m_none = load(os.path.join(CK, "valid", "dp2-model"))      # --compress none
m_zstd = load(os.path.join(CK, "valid", "dp4-model"))      # --compress zstd:3, other DP split
check(load.zstd_chunks > 0, "dp4-model has zstd-compressed chunks")
check(flat(m_none) == flat(m_zstd), "zstd:3 datasets decoded by h5py equal the uncompressed ones across DP layouts")
w = np.frombuffer(flat(m_none)["optimizer/blocks.0.w/master"], dtype="<f4")
check(w.shape == (100,) and abs(float(w[1]) - float(np.sin(0.37 + 0.0))) < 1e-6, "values as written")
if failures:
    sys.exit(1)
print("ckpt interop: all checks passed")
