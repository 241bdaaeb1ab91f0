"""Shared fixtures: the committed test data, the fpgather command (its JSON is what the package must
match) and a safetensors reader independent of the package (the goldens' bytes, read by hand)."""
import json
import os
import struct
import subprocess

import ml_dtypes
import numpy as np
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTDATA = os.environ.get("TESTDATA", os.path.join(REPO, "testdata"))


def data(*parts):
    return os.path.join(TESTDATA, *parts)


@pytest.fixture(scope="session")
def fpgather_cli():
    """Runs the fpgather command (FPGATHER, as ctest sets it) and returns (exit code, stdout, stderr)."""
    exe = os.environ.get("FPGATHER")
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("FPGATHER (the built fpgather command) is not set")

    def run(*args):
        p = subprocess.run([exe, "--no-progress", *args], capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    return run


@pytest.fixture(scope="session")
def cli_json(fpgather_cli):
    def run(*args, code=0):
        rc, out, err = fpgather_cli("--json", *args)
        assert rc == code, err
        return json.loads(out)

    return run


_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
              "I32": np.int32, "U32": np.uint32, "I64": np.int64, "U64": np.uint64, "C64": np.complex64,
              "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
              "F8_E8M0": ml_dtypes.float8_e8m0fnu, "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
              "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz}


def read_safetensors(path):
    """{name: array} of a .safetensors file, by its header: 8-byte length, JSON, data."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        lo, hi = h["data_offsets"]
        raw = blob[8 + n + lo:8 + n + hi]
        if h["dtype"] in _ST_DTYPES:
            out[name] = np.frombuffer(raw, dtype=_ST_DTYPES[h["dtype"]]).reshape(h["shape"])
        else:  # packed sub-byte types: their bytes
            out[name] = np.frombuffer(raw, dtype=np.uint8)
    return out
