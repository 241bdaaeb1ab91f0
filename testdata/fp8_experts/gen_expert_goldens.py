#!/usr/bin/env python3
"""Goldens for per-expert FP8 quantization (`fpgather convert --fp8`, lib/fp8/stacked.h), made with NumPy
and ml_dtypes, independently of fpgather.

    python3 testdata/fp8_experts/gen_expert_goldens.py      # needs numpy, ml_dtypes, safetensors

Writes, deterministically (fixed seed):
  experts.safetensors               the input: stacked expert weights and a plain matrix
      layers.0.experts.w13          BF16 [3, 130, 96]    experts of very different magnitude, one all zero
      layers.0.experts.w2           F32  [2, 2, 40, 64]  two expert dimensions, one expert tiny (1e-30)
      layers.0.dense.weight         BF16 [130, 96]       one matrix (rank 2: no expert dimension)
      layers.0.norm.weight          BF16 [96]            rank 1: not quantized
  expected-RECIPE.safetensors       for RECIPE in tensorwise, blockwise, blockwise-1x128, mxfp8 (e4m3, each
                                    recipe's defaults): per quantized tensor NAME, its FP8 bytes (U8, NAME's
                                    shape) and NAME_scale_inv (F32, or the E8M0 bytes as U8) in the stacked
                                    shape [E..., grid...]

Each [R, C] matrix of the expert dimensions is quantized on its own (TE current scaling tensorwise,
blockwise with power-of-two scales, MXFP8 with TE's round-up E8M0 rule), so a 128-row block never
spans two experts and each expert has its own tensorwise scale. Read by tests/unit/convert_experts_test.cpp.
"""
import os

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
F32 = np.float32
E4M3_MAX = F32(448.0)
RECIPES = ("tensorwise", "blockwise", "blockwise-1x128", "mxfp8")


def build():
    rng = np.random.default_rng(20261201)

    def normal(shape, std):
        x = rng.normal(0.0, std, size=shape).astype(F32)
        idx = rng.integers(0, x.size, size=max(1, x.size // 3000))
        x.reshape(-1)[idx] *= 40.0  # outliers, so block scales differ within a matrix
        return x

    w13 = np.stack([normal((130, 96), 0.02), normal((130, 96), 20.0), np.zeros((130, 96), F32)])
    w2 = np.stack([normal((40, 64), 0.5), normal((40, 64), 1e-30), normal((40, 64), 3.0), normal((40, 64), 0.01)])
    return {
        "layers.0.experts.w13": w13.astype(ml_dtypes.bfloat16),
        "layers.0.experts.w2": w2.reshape(2, 2, 40, 64),
        "layers.0.dense.weight": normal((130, 96), 0.05).astype(ml_dtypes.bfloat16),
        "layers.0.norm.weight": (1.0 + normal((96,), 0.1)).astype(ml_dtypes.bfloat16),
    }


def cast(x):
    """Saturating RNE cast to E4M3 (clamp to +-448 first, as TE and torchao do)."""
    return np.clip(x, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def scale_from_amax(amax, pow2, inf_fallback):
    amax = amax.astype(F32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = (E4M3_MAX / amax).astype(F32)  # IEEE fp32 division, round to nearest
    s = np.where(np.isinf(s), F32(inf_fallback), s).astype(F32)
    s = np.where((amax == 0) | ~np.isfinite(amax), F32(1.0), s).astype(F32)
    if pow2:
        s = (s.view(np.uint32) & np.uint32(0xFF800000)).view(F32)
    return s


def block_amax(x, br, bc):
    m, k = x.shape
    gm, gk = -(-m // br), -(-k // bc)
    pad = np.zeros((gm * br, gk * bc), F32)
    pad[:m, :k] = np.abs(x)
    return pad.reshape(gm, br, gk, bc).max(axis=(1, 3))


def expand(grid, br, bc, m, k):
    return np.repeat(np.repeat(grid, br, axis=0), bc, axis=1)[:m, :k]


def ceil_e8m0(v):
    """TE float_to_e8m0 (round up) of non-negative fp32 values."""
    u = v.astype(F32).view(np.uint32)
    e = (u >> 23) & 0xFF
    m = u & 0x7FFFFF
    e = e + ((m > 0) & (e != 0xFE) & ~((e == 0) & (m <= 0x400000)))
    return np.where(e > 0xFE, 0xFE, e).astype(np.uint8)


def exp2f_rcp(e):
    e = e.astype(np.uint32)
    bits = np.where(e == 254, np.uint32(0x00400000), ((254 - e) << 23).astype(np.uint32))
    return bits.view(F32)


def quantize_matrix(x, recipe, input_is_bf16):
    """One [R, C] matrix (fp32 values) -> (FP8 bytes [R, C], scale_inv grid)."""
    m, k = x.shape
    fallback = F32(ml_dtypes.finfo(ml_dtypes.bfloat16).max) if input_is_bf16 else np.finfo(F32).max
    if recipe == "tensorwise":
        s = scale_from_amax(np.array([np.abs(x).max()]), False, np.finfo(F32).max)[0]
        return cast((x * s).astype(F32)), np.array(F32(1.0) / s, F32).reshape(())
    if recipe in ("blockwise", "blockwise-1x128"):
        br = 128 if recipe == "blockwise" else 1
        s = scale_from_amax(block_amax(x, br, 128), True, fallback)
        return cast((x * expand(s, br, 128, m, k)).astype(F32)), (F32(1.0) / s).astype(F32)
    e = ceil_e8m0((block_amax(x, 1, 32) * (F32(1.0) / E4M3_MAX)).astype(F32))
    return cast((x * expand(exp2f_rcp(e), 1, 32, m, k)).astype(F32)), e


def quantize_stacked(a, recipe):
    """Every [R, C] matrix of the leading dimensions on its own; scales stacked [E..., grid...]."""
    shape = a.shape
    mats = a.astype(F32).reshape(-1, shape[-2], shape[-1])
    parts = [quantize_matrix(x, recipe, a.dtype == ml_dtypes.bfloat16) for x in mats]
    q = np.stack([p[0] for p in parts]).reshape(shape)
    s = np.stack([p[1] for p in parts])
    return q, s.reshape(tuple(shape[:-2]) + s.shape[1:])


def main():
    tensors = build()
    save_file(tensors, os.path.join(HERE, "experts.safetensors"),
              metadata={"producer": "fpgather testdata/fp8_experts/gen_expert_goldens.py"})
    for recipe in RECIPES:
        out = {}
        for name, a in tensors.items():
            if a.ndim < 2:
                continue
            q, s = quantize_stacked(a, recipe)
            out[name] = q
            out[name + "_scale_inv"] = s
        save_file(out, os.path.join(HERE, f"expected-{recipe}.safetensors"), metadata={"recipe": recipe})


if __name__ == "__main__":
    main()
