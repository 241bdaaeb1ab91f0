#!/usr/bin/env python3
"""Writes malformed safetensors files into bad/, with bad/manifest.json naming, for each file, the
tensor an error message must name (null when the fault is not in a tensor), what is wrong, and
whether the official library (safetensors 0.8) nonetheless accepts it. Plain Python, no third-party
modules; rerunnable, deterministic.

  python3 testdata/safetensors/make_bad_files.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "bad")


def pad(header: bytes) -> bytes:
    return header + b" " * ((8 - len(header) % 8) % 8)


def file_of(header, data: bytes, n=None) -> bytes:
    """header: dict (dumped compactly) or raw bytes; n overrides the length field."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":")).encode()
    header = pad(header)
    return struct.pack("<Q", len(header) if n is None else n) + header + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


DATA = bytes(range(14))  # "a": F32 [2] at [0, 8), "b": BF16 [3] at [8, 14)
GOOD = {"a": t("F32", [2], 0, 8), "b": t("BF16", [3], 8, 14)}

CASES = {
    # name: (bytes, tensor named in the message, what is wrong, accepted by the reference)
    "too_short": (b"\x10\x00\x00\x00\x00", None, "file shorter than the 8-byte length", False),
    "header_too_large": (struct.pack("<Q", 100_000_001) + b"{}" + b" " * 6, None,
                         "header length over the 100 MB limit", False),
    "header_past_end": (file_of(GOOD, DATA, n=4096), None, "header length runs past the end", False),
    "bad_json": (file_of(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dty', DATA),
                 None, "header is not valid JSON", False),
    "not_object": (file_of(b"[1,2,3]", b""), None, "header is JSON but not an object", False),
    "bad_utf8": (file_of(b'{"a\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', DATA[:8]),
                 None, "header is not UTF-8", False),
    "bom": (file_of(b"\xef\xbb\xbf" + json.dumps(GOOD, separators=(",", ":")).encode(), DATA),
            None, "header starts with a UTF-8 byte-order mark", False),
    "metadata_not_string": (file_of({"__metadata__": {"k": 1}, **GOOD}, DATA), None,
                            "__metadata__ value is not a string", False),
    "missing_field": (file_of({"a": {"dtype": "F32", "data_offsets": [0, 8]},
                               "b": GOOD["b"]}, DATA), "a", "tensor without shape", False),
    "bad_field_type": (file_of({"a": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]},
                                "b": GOOD["b"]}, DATA), "a", "shape is a string", False),
    "unknown_dtype": (file_of({"a": t("F12", [2], 0, 8), "b": GOOD["b"]}, DATA), "a",
                      "dtype F12 does not exist", False),
    "negative_shape": (file_of({"a": t("F32", [-2], 0, 8), "b": GOOD["b"]}, DATA), "a",
                       "negative dimension", False),
    "float_offset": (file_of(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]},'
                             b'"b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]}}', DATA),
                     "a", "offset is not an integer", False),
    "reversed_offsets": (file_of({"a": t("F32", [0], 8, 0), "b": t("BF16", [3], 8, 14)}, DATA),
                         "a", "data_offsets end before they begin", False),
    "shape_overflow": (file_of({"a": t("F32", [2**32, 2**32, 2], 0, 8), "b": GOOD["b"]}, DATA),
                       "a", "element count overflows 64 bits", False),
    "size_mismatch": (file_of({"a": GOOD["a"], "b": t("BF16", [4], 8, 14)}, DATA), "b",
                      "6 bytes for BF16 [4]", False),
    "out_of_range": (file_of({"a": GOOD["a"], "b": t("BF16", [46], 8, 100)}, DATA), "b",
                     "offsets past the end of the data", False),
    "overlap": (file_of({"a": GOOD["a"], "b": t("F32", [2], 4, 12)}, DATA[:12]), "b",
                "b overlaps a", False),
    "gap": (file_of({"a": GOOD["a"], "b": t("BF16", [3], 10, 16)}, DATA + b"\0\0"), "b",
            "two bytes between a and b belong to no tensor", False),
    "trailing_bytes": (file_of(GOOD, DATA + b"\0" * 4), "b",
                       "four bytes after the last tensor b", False),
    "duplicate_name": (file_of(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                               b'"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', DATA[:8]),
                       "a", "tensor a declared twice (the reference keeps one)", True),
    "subbyte_misaligned": (file_of({"a": t("F4", [3], 0, 2)}, DATA[:2]), "a",
                           "F4 [3] is 12 bits, not whole bytes", False),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = {}
    for name, (data, tensor, why, ref_accepts) in CASES.items():
        fname = name + ".safetensors"
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(data)
        manifest[fname] = {"tensor": tensor, "reason": why, "reference_accepts": ref_accepts}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
