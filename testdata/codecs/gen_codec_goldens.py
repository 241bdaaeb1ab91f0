#!/usr/bin/env python3
"""Golden tables for lib/core/float_codec.h (fp32 <-> bf16, fp16, FP8 E4M3fn, FP8 E5M2, E8M0).

Needs:   python3 with numpy, ml_dtypes (0.6) and torch (2.11, CPU build is enough).
Run:     python3 testdata/codecs/gen_codec_goldens.py            (from anywhere; ~20 s)
         python3 testdata/codecs/gen_codec_goldens.py --check    (regenerate in memory, compare with the
                                                                  committed files, write nothing)
Writes:  raw little-endian binaries next to this script, plus README.md (the manifest: what each file
         holds, its element count, which library it follows, and how torch and ml_dtypes disagree).
         tests/unit/float_codec_test.cpp reads them bit for bit. The output is deterministic (fixed seed).

File names are `<set>.<what>.<elem>.bin`: `<set>.f32.bin` holds the fp32 inputs (raw bits) and
`<set>.<codec>.<u8|u16>.bin` the expected code for each input, in the same order. Sets:
  fp32_sample  dense fp32 sample: every exponent, every rounding boundary of bf16/fp16/E4M3/E5M2/E8M0
               (just below / at / just above each midpoint), fp32 and target subnormals, +-0, +-inf,
               NaNs with various payloads and signs, float_codec_test.cpp's worked examples, random values.
  bf16_all     the 65,536 bf16 codes, as fp32 (this file is also the bf16 decode golden).
  fp16_all     the 65,536 fp16 codes, as fp32 (also the fp16 decode golden).
  e4m3_all, e5m2_all, e8m0_all   the 256 codes of each 8-bit format, decoded (`.f32.bin` only).

Which library each golden follows (the "reference"):
  * nonsaturating (`*_nonsat`, `bf16`, `fp16`, `e8m0`): torch 2.11 CPU `.to()`. torch is imported with
    ATEN_CPU_CAPABILITY=default so its CPU kernels take the portable c10 scalar conversions and the
    tables do not depend on the generating machine's SIMD level. This matters only for bf16 NaN: the
    AVX2/AVX-512 kernels give 0xFFFF, the c10 scalar path gives 0x7FC0 (sign dropped); we keep 0x7FC0.
    (Checked with torch 2.11 on AVX2: every other table is identical under both capabilities.)
    fp16 conversions go through the x86 F16C instructions on both paths (IEEE: NaN payload kept and
    quieted, in both directions).
  * saturate (`*_sat`): clamp to +-max finite, then the torch cast (what Transformer Engine's reference,
    torchao and DeepGEMM do); +-inf -> +-max. For FP8, a NaN input gives 0x7F with the sign dropped (the
    CUDA cvt.rn.satfinite result) -- set here explicitly, no library produces it on the CPU. For
    bf16/fp16 a NaN stays the nonsaturating NaN (a clamp passes NaN through).
  * decoders: torch for bf16, fp16, E4M3 and E5M2; ml_dtypes for E8M0 (torch decodes 0xFF to the
    signalling NaN 0x7F800001; ml_dtypes gives the quiet 0x7FC00000, which we keep).
  * Known torch/ml_dtypes disagreements (counted per file in README.md): E5M2 NaN (torch 0x7F|sign,
    ml_dtypes 0x7E|sign); E8M0 of 0, negatives, subnormals (torch ignores the sign and gives 0x00 for
    0, ml_dtypes gives 0xFF); bf16 NaN (ml_dtypes 0x7FC0|sign); fp16 NaN payloads (numpy keeps signalling
    NaNs signalling); decoded NaN bits of E4M3 and E5M2 (ml_dtypes 0x7FC00000|sign).
The E8M0 round-up ("ceil", TE/cuBLAS RCEIL) rule has no library golden; the C++ test checks it
against hand-derived cases and the exact "smallest power of two >= |x|" property.
"""
import argparse
import hashlib
import os
import sys

os.environ["ATEN_CPU_CAPABILITY"] = "default"  # before torch: portable, machine-independent kernels

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20260822

E4M3_MAX, E5M2_MAX, FP16_MAX = 448.0, 57344.0, 65504.0
BF16_MAX = float(np.array([0x7F7F0000], np.uint32).view(np.float32)[0])


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


# ---- references ---------------------------------------------------------------------------------

def t_cast(x, dtype):
    """torch `.to(dtype)` of fp32 values, returned as raw unsigned codes."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32).copy()).to(dtype)
    if dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    return t.view(torch.uint8).numpy().copy()


def t_sat(x, dtype, vmax, nan_code=None):
    """Clamp to +-vmax, then cast (TE / torchao). NaN: nan_code if given, else the plain cast's NaN."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32).copy())
    out = t_cast(torch.clamp(t, -vmax, vmax).numpy(), dtype)
    nan = np.isnan(x)
    out[nan] = nan_code if nan_code is not None else t_cast(x[nan], dtype)
    return out


def t_decode(codes, dtype):
    raw = torch.from_numpy(codes.view(np.int16 if codes.dtype == np.uint16 else np.uint8).copy())
    return bits(raw.view(dtype).float().numpy())


def ml_cast(x, dtype):
    with np.errstate(all="ignore"):
        out = np.asarray(x, np.float32).astype(dtype)
    return out.view(np.uint16 if out.dtype.itemsize == 2 else np.uint8)


def ml_decode(codes, dtype):
    return bits(codes.view(dtype).astype(np.float32))


# ---- inputs ---------------------------------------------------------------------------------------

def midpoint_triples(decoded_pos, top_mid):
    """Just below / at / just above the midpoint of each pair of adjacent positive finite codes, plus
    the overflow midpoint `top_mid` (max + half an ulp). `decoded_pos`: fp32 values, increasing."""
    lo = decoded_pos[:-1].astype(np.float64)
    hi = decoded_pos[1:].astype(np.float64)
    mids = np.concatenate([((lo + hi) / 2).astype(np.float32), np.float32([top_mid])])  # exact in fp32
    mb = bits(mids).astype(np.int64)
    return np.stack([mb - 1, mb, mb + 1], axis=1)  # ulp neighbours; mid > 0 so bits-1 >= 0


def build_sample(rng):
    groups = []  # (name, uint32 bits)

    def add(name, b):
        groups.append((name, np.asarray(b, dtype=np.uint64).astype(np.uint32).ravel()))

    # ±0, ±inf, NaNs with assorted payloads (quiet and signalling) and both signs.
    payloads = [0x400000, 0x000001, 0x000002, 0x001000, 0x002000, 0x003FFF, 0x0FE000, 0x100000,
                0x200000, 0x3FFFFF, 0x400001, 0x402000, 0x600000, 0x7FE000, 0x7FFFFF]
    payloads += list(rng.integers(1, 1 << 23, 49))
    nan = [0x7F800000 | p for p in payloads]
    add("specials", [0, 0x80000000, 0x7F800000, 0xFF800000] + nan + [n | 0x80000000 for n in nan])

    # The worked examples of tests/unit/float_codec_test.cpp and fp8_recipes_test.cpp.
    ex = [448.0, 464.0, np.nextafter(np.float32(464), np.float32(1e9)), 480.0, 1.0, 1.0625 + 2.0**-20,
          2.0**-10, 1.5 * 2.0**-10, 2.5 * 2.0**-9, -0.0, 61440.0, 57344.0, 1.25, 1.5, 3.0, -2.0,
          2.0**-127, 1.5 * 2.0**127, 0.75, 0.7, 1.3, 291.2, 358.4, 2.0**-9, 2.0**-16, 1e-40]
    ex = np.float32(ex)
    add("examples", np.concatenate([bits(ex), bits(-ex)]))

    # Every exponent 0..255 x mantissas that hit E8M0's round-to-nearest boundary (0x400000) and
    # the ends of the binade, x both signs.
    mants = np.array([0, 1, 2, 0x200000, 0x3FFFFF, 0x400000, 0x400001, 0x600000, 0x7FFFFE, 0x7FFFFF],
                     np.uint64)
    exps = np.arange(256, dtype=np.uint64)
    grid = (exps[:, None] << 23 | mants[None, :]).ravel()
    grid = np.concatenate([grid, (exps[:, None] << 23 | rng.integers(0, 1 << 23, (256, 4)).astype(np.uint64)).ravel()])
    add("exponents", np.concatenate([grid, grid | 0x80000000]))

    # fp32 subnormals: single bits, runs of ones, random; both signs.
    sub = [1 << k for k in range(23)] + [(1 << k) - 1 for k in range(1, 24)] + list(rng.integers(1, 1 << 23, 256))
    sub = np.array(sub, np.uint64)
    add("fp32_subnormals", np.concatenate([sub, sub | 0x80000000]))

    # Rounding boundaries of each target. Each triple gets one random sign for bf16/fp16 (the codecs
    # handle the sign apart from the magnitude); both signs for the 8-bit formats.
    def pos_codes_decoded(dec_u32, n_pos_finite):
        return f32(dec_u32[:n_pos_finite])

    bf16_dec = t_decode(np.arange(65536, dtype=np.uint32).astype(np.uint16), torch.bfloat16)
    fp16_dec = t_decode(np.arange(65536, dtype=np.uint32).astype(np.uint16), torch.float16)
    e4m3_dec = t_decode(np.arange(256, dtype=np.uint8), torch.float8_e4m3fn)
    e5m2_dec = t_decode(np.arange(256, dtype=np.uint8), torch.float8_e5m2)
    for name, dec, nfin, top in [("bf16_boundaries", bf16_dec, 0x7F80, BF16_MAX + 2.0**(127 - 8)),
                                 ("fp16_boundaries", fp16_dec, 0x7C00, FP16_MAX + 16.0)]:
        tr = midpoint_triples(pos_codes_decoded(dec, nfin), top)
        sign = rng.integers(0, 2, (tr.shape[0], 1)).astype(np.int64) << 31
        add(name, (tr | sign).ravel())
    for name, dec, nfin, top in [("e4m3_boundaries", e4m3_dec, 0x7F, E4M3_MAX + 16.0),
                                 ("e5m2_boundaries", e5m2_dec, 0x7C, E5M2_MAX + 4096.0)]:
        tr = midpoint_triples(pos_codes_decoded(dec, nfin), top).ravel()
        add(name, np.concatenate([tr, tr | 0x80000000]))

    # Random: uniform bit patterns (all classes, ~0.4% NaN), then values in the FP8 working ranges.
    add("random_bits", rng.integers(0, 1 << 32, 32768, dtype=np.uint64))
    mag = np.float32(2.0 ** rng.uniform(-30, 20, 16384)) * rng.choice(np.float32([-1, 1]), 16384)
    add("random_log", bits(mag))
    lin = np.concatenate([rng.uniform(-600, 600, 4096), rng.uniform(-70000, 70000, 4096)]).astype(np.float32)
    add("random_linear", bits(lin))

    # Keep the first occurrence of each input, in group order.
    seen, out, counts = set(), [], []
    for name, b in groups:
        kept = [v for v in b.tolist() if not (v in seen or seen.add(v))]
        out.extend(kept)
        counts.append((name, len(b), len(kept)))
    return np.array(out, np.uint32), counts


# ---- tables ---------------------------------------------------------------------------------------

def encode_all(x):
    """Every encoder golden for fp32 inputs x (float32 array). name -> (array, reference)."""
    return {
        "bf16": (t_cast(x, torch.bfloat16), "torch"),
        "bf16_sat": (t_sat(x, torch.bfloat16, BF16_MAX), "clamp + torch"),
        "fp16": (t_cast(x, torch.float16), "torch"),
        "fp16_sat": (t_sat(x, torch.float16, FP16_MAX), "clamp + torch"),
        "e4m3_nonsat": (t_cast(x, torch.float8_e4m3fn), "torch"),
        "e4m3_sat": (t_sat(x, torch.float8_e4m3fn, E4M3_MAX, 0x7F), "clamp + torch; NaN -> 0x7F"),
        "e5m2_nonsat": (t_cast(x, torch.float8_e5m2), "torch"),
        "e5m2_sat": (t_sat(x, torch.float8_e5m2, E5M2_MAX, 0x7F), "clamp + torch; NaN -> 0x7F"),
        "e8m0": (t_cast(x, torch.float8_e8m0fnu), "torch"),
    }


def ml_encode_all(x):
    """The same tables from ml_dtypes/numpy, only to count where the libraries disagree."""
    nan = np.isnan(x)

    def sat(dtype, vmax, nan_code=None):
        with np.errstate(all="ignore"):
            o = ml_cast(np.clip(x, -vmax, vmax), dtype).copy()
        if nan_code is not None:
            o[nan] = nan_code
        return o

    return {
        "bf16": ml_cast(x, ml_dtypes.bfloat16), "bf16_sat": sat(ml_dtypes.bfloat16, BF16_MAX),
        "fp16": ml_cast(x, np.float16), "fp16_sat": sat(np.float16, FP16_MAX),
        "e4m3_nonsat": ml_cast(x, ml_dtypes.float8_e4m3fn), "e4m3_sat": sat(ml_dtypes.float8_e4m3fn, E4M3_MAX, 0x7F),
        "e5m2_nonsat": ml_cast(x, ml_dtypes.float8_e5m2), "e5m2_sat": sat(ml_dtypes.float8_e5m2, E5M2_MAX, 0x7F),
        "e8m0": ml_cast(x, ml_dtypes.float8_e8m0fnu),
    }


def disagreement(x, ours, theirs):
    d = ours != theirs
    if not d.any():
        return "0"
    nan, zero = np.isnan(x), x == 0
    neg = (bits(x) >> 31).astype(bool) & ~nan
    sub = (np.abs(x) < np.float32(2.0**-126)) & ~zero & ~neg  # classes are disjoint
    parts = [f"{int(d.sum())}"]
    for label, m in [("NaN in", nan), ("zero in", zero), ("negative in", neg & ~zero), ("positive subnormal in", sub)]:
        if (d & m).any():
            parts.append(f"{int((d & m).sum())} {label}")
    other = d & ~(nan | zero | neg | sub)
    if other.any():
        parts.append(f"{int(other.sum())} OTHER")
    return parts[0] + (" (" + ", ".join(parts[1:]) + ")" if len(parts) > 1 else "")


def build_tables(rng):
    files = {}  # name -> (array, description, reference, disagreement text)
    sample, group_counts = build_sample(rng)
    x = f32(sample)
    files["fp32_sample.f32.bin"] = (sample, "fp32 inputs (bits) of the dense sample", "-", "-")
    ml = ml_encode_all(x)
    for k, (arr, ref) in encode_all(x).items():
        files[f"fp32_sample.{k}.{'u16' if arr.dtype == np.uint16 else 'u8'}.bin"] = (
            arr, f"fp32_sample -> {k}", ref, disagreement(x, arr, ml[k]))

    codes16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    for fmt, dt, mdt, encs in [("bf16", torch.bfloat16, ml_dtypes.bfloat16, ["fp16", "fp16_sat"]),
                               ("fp16", torch.float16, np.float16, ["bf16"])]:
        dec = t_decode(codes16, dt)
        files[f"{fmt}_all.f32.bin"] = (dec, f"all {fmt} codes decoded to fp32 (= the inputs of {fmt}_all.*)",
                                       "torch", disagreement(f32(dec), dec, ml_decode(codes16, mdt)))
        xa = f32(dec)
        enc, mle = encode_all(xa), ml_encode_all(xa)
        for k in encs + ["e4m3_nonsat", "e4m3_sat", "e5m2_nonsat", "e5m2_sat", "e8m0"]:
            arr, ref = enc[k]
            files[f"{fmt}_all.{k}.{'u16' if arr.dtype == np.uint16 else 'u8'}.bin"] = (
                arr, f"{fmt}_all -> {k}", ref, disagreement(xa, arr, mle[k]))

    codes8 = np.arange(256, dtype=np.uint8)
    for fmt, dt, mdt in [("e4m3", torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
                         ("e5m2", torch.float8_e5m2, ml_dtypes.float8_e5m2),
                         ("e8m0", torch.float8_e8m0fnu, ml_dtypes.float8_e8m0fnu)]:
        td, md = t_decode(codes8, dt), ml_decode(codes8, mdt)
        chosen, ref = (md, "ml_dtypes") if fmt == "e8m0" else (td, "torch")
        other = td if fmt == "e8m0" else md
        files[f"{fmt}_all.f32.bin"] = (chosen, f"all 256 {fmt} codes decoded to fp32", ref,
                                       disagreement(f32(chosen), chosen, other))
    return files, group_counts


def manifest(files, group_counts):
    lines = [
        "# Codec golden tables (generated)",
        "",
        "Written by `gen_codec_goldens.py` (see its docstring for how to rerun it and what each reference means);",
        "read by `tests/unit/float_codec_test.cpp`. Raw little-endian; `<set>.f32.bin` is the fp32 input of",
        "`<set>.<codec>.*.bin`, element by element. Generated with "
        f"torch {torch.__version__} (ATEN_CPU_CAPABILITY={os.environ['ATEN_CPU_CAPABILITY']}), "
        f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}; seed {SEED}.",
        "",
        "torch's AVX2/AVX-512 kernels differ from these tables only on bf16 NaN outputs (0xFFFF instead of 0x7FC0).",
        "",
        "`vs other lib` counts the entries where ml_dtypes (numpy for fp16) gives other bits, by input class",
        "(for the E8M0 decode, where ml_dtypes is the reference, the other library is torch).",
        "",
        "| file | elements | holds | reference | vs other lib | sha256[:16] |",
        "|---|---|---|---|---|---|",
    ]
    for name, (arr, desc, ref, dis) in files.items():
        h = hashlib.sha256(arr.tobytes()).hexdigest()[:16]
        lines.append(f"| `{name}` | {arr.size} | {desc} | {ref} | {dis} | {h} |")
    lines += ["", "fp32_sample groups (inputs generated / kept after removing repeats):", ""]
    lines += [f"- {n}: {a} / {k}" for n, a, k in group_counts]
    total = sum(a.nbytes for a, *_ in files.values())
    lines += ["", f"Total: {len(files)} files, {total} bytes.", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files; write nothing")
    args = ap.parse_args()
    files, group_counts = build_tables(np.random.default_rng(SEED))
    for name, (arr, *_rest) in files.items():
        assert arr.dtype.byteorder in ("=", "<", "|") and sys.byteorder == "little"
    if args.check:
        bad = [n for n, (a, *_r) in files.items()
               if not os.path.exists(os.path.join(HERE, n))
               or open(os.path.join(HERE, n), "rb").read() != a.tobytes()]
        print("differs: " + ", ".join(bad) if bad else f"all {len(files)} files identical")
        return 1 if bad else 0
    for name, (arr, *_rest) in files.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(arr.tobytes())
    with open(os.path.join(HERE, "README.md"), "w") as f:
        f.write(manifest(files, group_counts))
    print(manifest(files, group_counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
