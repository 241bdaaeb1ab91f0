#!/usr/bin/env python3
"""Checks a model directory that `fpgather convert DIR OUT --fp8 tensorwise|mxfp8` wrote against what
compressed-tensors' loaders (vLLM, transformers) read, with tests/cli/convert_outputs.sh:

  compressed_tensors_check.py RECIPE ORIG QUANT DEQ REF_DEQ

ORIG is the input directory, QUANT the output, DEQ `convert QUANT --dequantize --dtype fp32`, REF_DEQ
the same recipe quantized into a .safetensors file (NAME_scale_inv) and dequantized the same way.
config.json must declare the recipe in compressed-tensors' form; every FP8 tensor NAME must have a
NAME_scale (F32 [E..., 1] per tensor; U8 E8M0 [E..., R, C/32] for MX) and no NAME_scale_inv or
input_scale be written; x_q * weight_scale, as compressed-tensors dequantizes (MX exponents as
2^(e-127) over groups of 32), must equal DEQ and REF_DEQ exactly and ORIG within FP8 E4M3's
rounding. Prints one line per problem and exits 1 if any.

With the compressed_tensors package importable, also decompresses QUANT with its MX / naive
compressor and compares (skipped, said so, without it).
"""
import glob
import json
import os
import sys

import ml_dtypes
import numpy as np
from safetensors import deserialize

DTYPES = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "I64": np.int64, "U8": np.uint8,
          "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E8M0": np.uint8}
problems = []


def load_dir(path):
    """Every tensor of a directory's (or a file's) safetensors files, through the official parser."""
    files = sorted(glob.glob(os.path.join(path, "*.safetensors"))) if os.path.isdir(path) else [path]
    out = {}
    for f in files:
        with open(f, "rb") as fh:
            for name, t in deserialize(fh.read()):
                out[name] = np.frombuffer(t["data"], DTYPES[t["dtype"]]).reshape(t["shape"]), t["dtype"]
    return out


def expect(cond, what):
    if not cond:
        problems.append(what)


def check_config(recipe, config, fp8_names, tensors):
    q = config.get("quantization_config", {})
    expect(q.get("quant_method") == "compressed-tensors", f"quant_method {q.get('quant_method')}")
    expect(q.get("quantization_status") == "compressed", "quantization_status")
    mx = recipe == "mxfp8"
    expect(q.get("format") == ("mxfp8-quantized" if mx else "float-quantized"), f"format {q.get('format')}")
    group = q.get("config_groups", {}).get("group_0", {})
    w, a = group.get("weights", {}), group.get("input_activations", {})
    expect(group.get("targets") == ["Linear"], "targets")
    expect(w.get("num_bits") == 8 and w.get("type") == "float" and w.get("dynamic") is False, f"weights {w}")
    expect(a.get("dynamic") is True, f"input_activations {a}")
    if mx:
        for args in (w, a):
            expect(args.get("strategy") == "group" and args.get("group_size") == 32 and
                   args.get("scale_dtype") == "torch.uint8", f"MX args {args}")
    else:
        expect(w.get("strategy") == "tensor", f"weights strategy {w.get('strategy')}")
        expect(a.get("strategy") == "token", f"activation strategy {a.get('strategy')}")
    # ignore: every 2-D ".weight" left in high precision, by module name.
    unquantized = sorted(n[:-len(".weight")] for n, (v, dt) in tensors.items()
                         if n.endswith(".weight") and v.ndim >= 2 and dt in ("BF16", "F32") and n not in fp8_names)
    expect(sorted(q.get("ignore", [])) == unquantized, f"ignore {q.get('ignore')} != {unquantized}")


def weight_scale(recipe, q_name, data, scale, dtype):
    """compressed-tensors' scale of `data` broadcast to its shape, after checking its dtype and shape."""
    lead = data.shape[:-2] if data.ndim >= 3 else ()
    if recipe == "mxfp8":
        want = data.shape[:-1] + (data.shape[-1] // 32,)
        expect(dtype == "U8", f"{q_name}: dtype {dtype}, not U8")
        expect(scale.shape == want, f"{q_name}: shape {scale.shape}, not {want}")
        s = np.exp2(scale.astype(np.float32) - 127).astype(np.float32)
        return np.repeat(s, 32, axis=-1)
    want = lead + (1,)
    expect(dtype == "F32", f"{q_name}: dtype {dtype}, not F32")
    expect(scale.shape == want, f"{q_name}: shape {scale.shape}, not {want}")
    return scale.reshape(lead + (1, 1)) if lead else scale.reshape(())


def main():
    recipe, orig_dir, quant_dir, deq_path, ref_path = sys.argv[1:6]
    orig, quant, deq, ref = load_dir(orig_dir), load_dir(quant_dir), load_dir(deq_path), load_dir(ref_path)
    with open(os.path.join(quant_dir, "config.json")) as f:
        config = json.load(f)
    fp8_names = {n for n, (_, dt) in quant.items() if dt == "F8_E4M3"}
    expect(len(fp8_names) > 0, "no FP8 tensors")
    expect(not [n for n in quant if n.endswith("_scale_inv") or n.endswith("input_scale")],
           "a _scale_inv or input_scale tensor was written")
    check_config(recipe, config, fp8_names, quant)
    decoded = {}
    for name in sorted(fp8_names):
        data = quant[name][0]
        if name + "_scale" not in quant:
            problems.append(f"{name}: no {name}_scale")
            continue
        scale, dtype = quant[name + "_scale"]
        s = weight_scale(recipe, name + "_scale", data, scale, dtype)
        x = (data.astype(np.float32) * s).astype(np.float32)  # compressed-tensors: x_q * scale
        decoded[name] = x
        expect(np.array_equal(x, deq[name][0]), f"{name}: x_q * weight_scale differs from --dequantize")
        expect(np.array_equal(deq[name][0], ref[name][0]), f"{name}: differs from the NAME_scale_inv round trip")
        o = orig[name][0].astype(np.float32)
        # E4M3 keeps 3 mantissa bits (relative error <= 2^-4 of the value) down to its subnormals
        # (absolute error <= 2^-10 of the scale).
        bound = np.abs(o) * 2.0**-4 + np.broadcast_to(s, o.shape) * 2.0**-9
        expect(np.all(np.abs(x - o) <= bound), f"{name}: farther from the original than FP8 rounding")
    print(f"{recipe}: {len(fp8_names)} FP8 tensors with compressed-tensors scales checked")
    interop(recipe, quant_dir, config, decoded)
    for p in problems:
        print("problem:", p)
    sys.exit(1 if problems else 0)


def interop(recipe, quant_dir, config, decoded):
    """compressed-tensors' own compressor decompresses each quantized Linear weight of QUANT."""
    try:
        import torch
        from compressed_tensors.compressors import BaseCompressor
        from compressed_tensors.quantization import QuantizationConfig
        from safetensors.torch import load_file
    except ImportError as e:
        print(f"compressed_tensors interop skipped: {e}")
        return
    qc = QuantizationConfig.model_validate(config["quantization_config"])
    scheme = qc.config_groups["group_0"]
    compressor = BaseCompressor.get_value_from_registry(qc.format)
    state = {}
    for f in glob.glob(os.path.join(quant_dir, "*.safetensors")):
        state.update(load_file(f))
    checked = 0
    for name, want in decoded.items():
        if not name.endswith(".weight"):
            continue  # a stacked expert tensor is no Linear module's weight
        module = {"weight": state[name], "weight_scale": state[name + "_scale"]}
        got = compressor.decompress(module, scheme)["weight"].to(torch.float32).numpy()
        # compressed-tensors decompresses into the scale's dtype (bfloat16 for MX): compare there.
        rounded = torch.from_numpy(want).to(compressor_dtype(recipe)).to(torch.float32).numpy()
        expect(np.array_equal(got, rounded), f"{name}: compressed_tensors decompresses other values")
        checked += 1
    expect(checked > 0, "compressed_tensors checked no weight")
    print(f"compressed_tensors {recipe}: {checked} weights decompressed equal")


def compressor_dtype(recipe):
    import torch
    return torch.bfloat16 if recipe == "mxfp8" else torch.float32


if __name__ == "__main__":
    main()
