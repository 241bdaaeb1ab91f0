#!/usr/bin/env python3
"""Interop: files written by `fpgather convert` are opened by the official safetensors reader, and
their FP8 bytes and scales equal an independent NumPy + ml_dtypes implementation of each recipe
(TE current scaling, blockwise, MXFP8 with TE's round-up E8M0 rule) applied to the stored values; a
tensor of rank >= 3 is quantized per expert (each [R, C] matrix on its own, scales stacked
[E..., ...]). Dequantized files are checked the same way.

Run by ctest with FPGATHER (the binary) and TESTDATA set; exits 77 (skipped) without numpy,
ml_dtypes or safetensors.
"""
import os
import re
import subprocess
import sys
import tempfile

try:
    import ml_dtypes
    import numpy as np
    from safetensors import deserialize, safe_open
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e}")
    sys.exit(77)

FPGATHER = os.environ["FPGATHER"]
MODEL = os.path.join(os.environ["TESTDATA"], "models", "tiny-llama.safetensors")
F32 = np.float32
E4M3_MAX, E5M2_MAX = F32(448.0), F32(57344.0)


DTYPES = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16, "I64": np.int64,
          "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2, "F8_E8M0": np.uint8}


def load_file(path):
    """Every tensor of a file through the official (Rust) parser, which validates the whole header;
    its NumPy front end has no FP8 dtypes, so the raw bytes are typed here."""
    with open(path, "rb") as f:
        entries = deserialize(f.read())
    return {name: np.frombuffer(t["data"], DTYPES[t["dtype"]]).reshape(t["shape"]) for name, t in entries}


def to_f32(a):
    return a.astype(np.float32)


def cast(x, fmt):
    """Saturating RNE cast of fp32 values (clamp to +-max first, as TE and torchao do)."""
    mx = E4M3_MAX if fmt == "e4m3" else E5M2_MAX
    dt = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    return np.clip(x, -mx, mx).astype(dt).view(np.uint8)


def scale_from_amax(amax, fmt, pow2, inf_fallback):
    mx = E4M3_MAX if fmt == "e4m3" else E5M2_MAX
    amax = amax.astype(F32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = (mx / amax).astype(F32)  # IEEE fp32 division, round to nearest
    s = np.where(np.isinf(s), F32(inf_fallback), s).astype(F32)
    s = np.where((amax == 0) | ~np.isfinite(amax), F32(1.0), s).astype(F32)
    if pow2:
        s = (s.view(np.uint32) & np.uint32(0xFF800000)).view(F32)
    return s


def blocks(x2d, br, bc):
    """amax over (br x bc) blocks of a 2-D array, edge blocks partial."""
    m, k = x2d.shape
    gm, gk = -(-m // br), -(-k // bc)
    pad = np.zeros((gm * br, gk * bc), F32)
    pad[:m, :k] = np.abs(x2d)
    return pad.reshape(gm, br, gk, bc).max(axis=(1, 3))


def expand(grid, br, bc, m, k):
    return np.repeat(np.repeat(grid, br, axis=0), bc, axis=1)[:m, :k]


def ceil_e8m0(v):
    """TE float_to_e8m0 (round up) of non-negative fp32 values."""
    u = v.astype(F32).view(np.uint32)
    e = (u >> 23) & 0xFF
    m = u & 0x7FFFFF
    bump = (m > 0) & (e != 0xFE) & ~((e == 0) & (m <= 0x400000))
    e = e + bump
    e = np.where(e > 0xFE, 0xFE, e)
    return e.astype(np.uint8)


def exp2f_rcp(e):
    e = e.astype(np.uint32)
    bits = ((254 - e) << 23).astype(np.uint32)
    bits = np.where(e == 254, np.uint32(0x00400000), bits)
    return bits.view(F32)


def reference(x, shape, recipe, fmt, input_is_bf16):
    m = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    k = shape[-1]
    x2 = x.reshape(m, k)
    bf16_max = F32(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    fallback = bf16_max if input_is_bf16 else np.finfo(F32).max
    if recipe == "tensorwise":
        s = scale_from_amax(np.array([np.abs(x2).max()]), fmt, False, np.finfo(F32).max)[0]
        q = cast((x2 * s).astype(F32), fmt)
        return q, np.array(F32(1.0) / s, F32).reshape(())
    if recipe in ("blockwise", "blockwise-1x128"):
        br = 128 if recipe == "blockwise" else 1
        s = scale_from_amax(blocks(x2, br, 128), fmt, True, fallback)
        q = cast((x2 * expand(s, br, 128, m, k)).astype(F32), fmt)
        return q, (F32(1.0) / s).astype(F32)
    if recipe == "mxfp8":
        amax = blocks(x2, 1, 32)
        rcp = F32(1.0) / (E4M3_MAX if fmt == "e4m3" else E5M2_MAX)
        e = ceil_e8m0((amax * rcp).astype(F32))
        q = cast((x2 * expand(exp2f_rcp(e), 1, 32, m, k)).astype(F32), fmt)
        return q, e
    raise ValueError(recipe)


def reference_stacked(x, shape, recipe, fmt, input_is_bf16):
    """Rank >= 3: every [R, C] matrix of the leading (expert) dimensions on its own, scales stacked."""
    if len(shape) < 3:
        return reference(x, shape, recipe, fmt, input_is_bf16)
    mats = [reference(m, shape[-2:], recipe, fmt, input_is_bf16) for m in x.reshape(-1, *shape[-2:])]
    q = np.stack([m[0] for m in mats]).reshape(shape)
    s = np.stack([m[1] for m in mats])
    return q, s.reshape(list(shape[:-2]) + list(s.shape[1:]))


def dequant_multiplier(gs, recipe, m, k):
    """float(q) is multiplied by this [m, k] array (one matrix's scales)."""
    if recipe == "tensorwise":
        return gs.reshape(())
    if recipe == "mxfp8":
        return expand((gs.view(np.uint8).astype(np.uint32) << 23).view(F32), 1, 32, m, k)
    return expand(gs, 128 if recipe == "blockwise" else 1, 128, m, k)


def main():
    src = load_file(MODEL)
    dtypes = {n: ("BF16" if a.dtype == ml_dtypes.bfloat16 else str(a.dtype)) for n, a in src.items()}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in ("tensorwise", "blockwise", "blockwise-1x128", "mxfp8"):
            for fmt in ("e4m3", "e5m2"):
                out = os.path.join(tmp, f"{recipe}-{fmt}.safetensors")
                subprocess.run([FPGATHER, "--no-progress", "convert", MODEL, out, "--fp8", recipe,
                                "--fp8-format", fmt], check=True, stdout=subprocess.DEVNULL)
                got = load_file(out)  # the official reader validates the file as it opens it
                with safe_open(out, "numpy") as f:
                    meta = f.metadata()
                assert meta["fpgather.fp8.recipe"] == recipe, meta
                for name, arr in src.items():
                    chosen = arr.dtype in (np.float32, ml_dtypes.bfloat16) and arr.ndim >= 2
                    if not chosen:
                        assert name + "_scale_inv" not in got, name
                        if not np.array_equal(got[name].view(np.uint8), arr.view(np.uint8)):
                            print(f"FAIL {recipe}/{fmt} {name}: copied tensor changed"); failures += 1
                        continue
                    q, s = reference_stacked(to_f32(arr), list(arr.shape), recipe, fmt, dtypes[name] == "BF16")
                    gq = got[name].view(np.uint8).reshape(q.shape)
                    gs = got[name + "_scale_inv"]
                    gs = gs.view(np.uint8) if recipe == "mxfp8" else gs
                    if not np.array_equal(gq, q):
                        bad = np.argwhere(gq != q)[0]
                        print(f"FAIL {recipe}/{fmt} {name}: data differs first at {tuple(bad)}: "
                              f"{gq[tuple(bad)]:#04x} vs {q[tuple(bad)]:#04x}"); failures += 1
                    if gs.shape != s.shape or gs.tobytes() != s.tobytes():
                        print(f"FAIL {recipe}/{fmt} {name}: scale_inv differs ({gs.shape} vs {s.shape})")
                        failures += 1

                # dequantize back; compare with float(q) * scale_inv rounded to bf16
                deq = os.path.join(tmp, f"{recipe}-{fmt}-deq.safetensors")
                subprocess.run([FPGATHER, "--no-progress", "convert", out, deq, "--dequantize"],
                               check=True, stdout=subprocess.DEVNULL)
                back = load_file(deq)
                assert not any(n.endswith("_scale_inv") for n in back), "scale tensors must be dropped"
                for name, arr in src.items():
                    if name + "_scale_inv" not in got:
                        continue
                    fp8dt = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
                    gs = got[name + "_scale_inv"]
                    if arr.ndim >= 3:  # per expert: matrices [R, C], scales [E, ...]
                        qm = to_f32(got[name].view(fp8dt)).reshape(-1, *arr.shape[-2:])
                        sm = gs.reshape(qm.shape[0], *gs.shape[arr.ndim - 2:])
                    else:
                        qm = to_f32(got[name].view(fp8dt)).reshape(1, -1, arr.shape[-1])
                        sm = gs.reshape(1, *gs.shape)
                    m, k = qm.shape[1:]
                    want = np.stack([qm[e] * dequant_multiplier(sm[e], recipe, m, k) for e in range(qm.shape[0])])
                    want = want.astype(F32).astype(ml_dtypes.bfloat16)
                    if back[name].dtype != ml_dtypes.bfloat16 or not np.array_equal(
                            back[name].reshape(want.shape).view(np.uint16), want.view(np.uint16)):
                        print(f"FAIL dequantize {recipe}/{fmt} {name}"); failures += 1
                    # and the round trip stays close to the source values
                    rel = np.abs(to_f32(back[name]) - to_f32(arr)) / (np.abs(to_f32(arr)).max() + 1e-30)
                    if rel.max() > (0.07 if fmt == "e4m3" else 0.14):
                        print(f"FAIL round trip {recipe}/{fmt} {name}: {rel.max()}"); failures += 1
    print("interop convert:", "FAILED" if failures else "ok", f"({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
