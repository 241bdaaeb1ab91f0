"""quantize/dequantize against the FP8 expert goldens; the optimizer steps against torch's goldens
(testdata/optim, written by torch 2.11 on the CPU), bit for bit."""
import json

import ml_dtypes
import numpy as np
import pytest

import fpgather
from conftest import data, read_safetensors

RECIPES = ["tensorwise", "blockwise", "blockwise-1x128", "mxfp8"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_quantize_equals_the_goldens(recipe):
    """Each expert matrix quantized on its own equals the generator's bytes and scales."""
    src = read_safetensors(data("fp8_experts", "experts.safetensors"))
    want = read_safetensors(data("fp8_experts", f"expected-{recipe}.safetensors"))
    checked = 0
    for name, x in src.items():
        if name + "_scale_inv" not in want:
            continue
        x = x.astype(np.float32)
        mats = x.reshape((-1,) + x.shape[-2:])
        parts = [fpgather.quantize(m, recipe) for m in mats]
        q = np.stack([p[0] for p in parts]).reshape(x.shape)
        s = np.stack([p[1] for p in parts])
        assert q.dtype == ml_dtypes.float8_e4m3fn
        assert q.view(np.uint8).tobytes() == want[name].tobytes(), name
        assert s.reshape(-1).view(np.uint8).tobytes() == want[name + "_scale_inv"].reshape(-1).view(np.uint8).tobytes(), name
        back = fpgather.dequantize(parts[0][0], parts[0][1], recipe)
        assert back.dtype == np.float32 and back.shape == mats[0].shape
        scale = parts[0][1].astype(np.float32)
        if recipe == "tensorwise":
            np.testing.assert_array_equal(back, parts[0][0].astype(np.float32) * scale)
        checked += 1
    assert checked >= 2


def test_quantize_scales_and_formats():
    x = np.linspace(-3, 3, 256 * 64, dtype=np.float32).reshape(256, 64)
    q, s = fpgather.quantize(x, "blockwise", "e5m2")
    assert q.dtype == ml_dtypes.float8_e5m2 and q.shape == (256, 64)
    assert s.dtype == np.float32 and s.shape == (2, 1)
    q, s = fpgather.quantize(x, "mxfp8")
    assert s.dtype == ml_dtypes.float8_e8m0fnu and s.shape == (256, 2)
    np.testing.assert_allclose(fpgather.dequantize(q, s, "mxfp8"), x, rtol=0.07, atol=1e-6)
    with pytest.raises(fpgather.UsageError):
        fpgather.quantize(x, "per-row")
    with pytest.raises(fpgather.UsageError):
        fpgather.quantize(np.zeros((3, 33), np.float32), "mxfp8")  # K not a multiple of 32
    with pytest.raises(fpgather.UsageError):
        fpgather.dequantize(np.zeros(4, np.float32), np.ones((), np.float32))


def _cases():
    with open(data("optim", "manifest.json")) as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_optimizer_steps_equal_torch(case):
    blob = np.fromfile(data("optim", case["file"]), dtype=np.float32)

    def arr(key):
        off, n = case["arrays"][key]
        return blob[off:off + n].reshape(case["shape"]).copy()

    h, opt = case["hyper"], case["optimizer"]
    p = arr("param/0")
    states = {s: np.zeros_like(p) for s in ("exp_avg", "exp_avg_sq", "momentum_buffer")}
    for t in range(1, case["steps"] + 1):
        g = arr(f"grad/{t}")
        if opt in ("adam", "adamw"):
            fpgather.adam_step(p, g, states["exp_avg"], states["exp_avg_sq"], step=t, lr=h["lr"],
                               betas=tuple(h["betas"]), eps=h["eps"], weight_decay=h["weight_decay"],
                               decoupled_weight_decay=h["decoupled"])
        elif opt == "lion":
            fpgather.lion_step(p, g, states["exp_avg"], lr=h["lr"], betas=tuple(h["betas"]),
                               weight_decay=h["weight_decay"])
        elif opt == "muon":
            # Newton-Schulz runs in bf16 GEMMs, whose summation order differs from torch's: the
            # momentum buffer is bitwise torch's, the update within 5% (relative Frobenius) of it,
            # each step from torch's parameters.
            p = arr(f"param/{t - 1}")
            p_in = p.astype(np.float64)
            fpgather.muon_step(p, g, states["momentum_buffer"], lr=h["lr"], weight_decay=h["weight_decay"],
                               momentum=h["momentum"], nesterov=h["nesterov"], ns_steps=h["ns_steps"],
                               adjust_lr=h["adjust_lr_fn"] or "original")
            decayed = p_in * (1.0 - h["lr"] * h["weight_decay"])
            ours, theirs = p - decayed, arr(f"param/{t}") - decayed
            assert np.linalg.norm(ours - theirs) <= 0.05 * np.linalg.norm(theirs), f"update of step {t}"
            if f"momentum_buffer/{t}" in case["arrays"]:
                assert states["momentum_buffer"].tobytes() == arr(f"momentum_buffer/{t}").tobytes(), t
            continue
        else:
            pytest.fail(f"unknown optimizer {opt}")
        if f"param/{t}" in case["arrays"]:
            assert p.tobytes() == arr(f"param/{t}").tobytes(), f"param after step {t}"
        for s, v in states.items():
            if f"{s}/{t}" in case["arrays"]:
                assert v.tobytes() == arr(f"{s}/{t}").tobytes(), f"{s} after step {t}"


def test_steps_are_in_place_and_checked():
    p = np.ones(4, np.float32)
    m, v = np.zeros(4, np.float32), np.zeros(4, np.float32)
    fpgather.adam_step(p, np.full(4, 0.5), m, v, step=1, lr=0.1, weight_decay=0.01, decoupled_weight_decay=True)
    np.testing.assert_allclose(p, 0.899, rtol=1e-6)
    with pytest.raises(fpgather.UsageError):
        fpgather.adam_step(p.astype(np.float64), np.ones(4), m, v, step=1)
    with pytest.raises(fpgather.UsageError):
        fpgather.adam_step(p, np.ones(3), m, v, step=1)
    with pytest.raises(fpgather.UsageError):
        fpgather.adam_step(p, np.ones(4), m, v, step=0)
    with pytest.raises(fpgather.UsageError):
        fpgather.muon_step(p, np.ones(4), m)
