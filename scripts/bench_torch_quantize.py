#!/usr/bin/env python3
"""PyTorch baselines of the batched FP8 copy-back, for `fpgather bench gpu-quantize` (BENCHMARKS.md).

Reads the parameter shapes the fpgather bench used (--shapes, written by its --shapes-json) and times,
with CUDA events (2 warm-ups, median of --reps), tensorwise E4M3 quantization of fp32 masters:
  (a) loop:     a Python loop of per-parameter PyTorch ops: amax = x.abs().amax(); scale = 448/amax;
                q = (x*scale).clamp(-448, 448).to(torch.float8_e4m3fn)
  (b) compiled: torch.compile of the whole batch: the masters in one flat buffer (as a distributed
                optimizer holds them), per-parameter amax by a segmented scatter_reduce('amax'), the
                segment of each element from torch.bucketize on its index (computed in the kernel,
                not read), then the same scale/clamp/cast.
With --ours (the fpgather bench's --json output), prints ours / theirs for the batch:tensorwise row.
Prints one JSON object on stdout.
"""
import argparse
import json
import sys
import time

import torch

FP8_MAX = 448.0


def quant_one(x):
    amax = x.abs().amax()
    scale = FP8_MAX / torch.clamp(amax, min=1e-12)
    return (x * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale.reciprocal()


def quant_flat(flat, bounds, nseg):
    idx = torch.arange(flat.numel(), device=flat.device)
    seg = torch.bucketize(idx, bounds, right=True) - 1
    amax = torch.zeros(nseg, device=flat.device, dtype=flat.dtype).scatter_reduce(
        0, seg, flat.abs(), reduce="amax", include_self=True)
    scale = FP8_MAX / torch.clamp(amax, min=1e-12)
    q = (flat * scale[seg]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale.reciprocal()


def time_cuda(fn, reps):
    fn()
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(reps):
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    return ms[len(ms) // 2], ms[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True, help="shapes JSON written by fpgather bench gpu-quantize --shapes-json")
    ap.add_argument("--ours", help="fpgather bench gpu-quantize --json output, for the ratios")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true", help="skip (b)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 77
    shapes = json.load(open(args.shapes))["shapes"]
    dev = torch.device("cuda")
    numels = [1] * len(shapes)
    for i, s in enumerate(shapes):
        for d in s:
            numels[i] *= d
    total = sum(numels)
    g = torch.Generator(device=dev).manual_seed(0)
    flat = torch.randn(total, device=dev, generator=g) * 0.02
    params = list(torch.split(flat, numels))
    params = [p.view(*s) for p, s in zip(params, shapes)]
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "params": len(shapes),
           "elements": total, "reps": args.reps}

    def loop():
        for p in params:
            quant_one(p)

    res["loop_ms"], res["loop_best_ms"] = time_cuda(loop, args.reps)
    print(f"loop: {res['loop_ms']:.3f} ms", file=sys.stderr)

    if not args.no_compile:
        offsets = [0]
        for n in numels[:-1]:
            offsets.append(offsets[-1] + n)
        bounds = torch.tensor(offsets, device=dev, dtype=torch.int64)
        fn = torch.compile(quant_flat)
        t0 = time.time()
        q, _ = fn(flat, bounds, len(shapes))
        torch.cuda.synchronize()
        res["compile_s"] = time.time() - t0
        print(f"compiled in {res['compile_s']:.1f} s", file=sys.stderr)
        # The compiled result equals the eager loop's bytes (same ops, per parameter).
        ref = torch.cat([quant_one(p)[0].view(-1) for p in params])
        res["compiled_matches_loop"] = bool(torch.equal(q.view(torch.uint8), ref.view(torch.uint8)))
        del ref, q
        res["compiled_ms"], res["compiled_best_ms"] = time_cuda(lambda: fn(flat, bounds, len(shapes)), args.reps)

    if args.ours:
        ours = json.load(open(args.ours))
        rows = [r for r in ours["results"] if r["recipe"] == "batch:tensorwise" and r["pass"] == "quantize"]
        if rows:
            o = rows[0]["median_ms"]
            res["ours_ms"] = o
            res["speedup_vs_loop"] = res["loop_ms"] / o
            if "compiled_ms" in res:
                res["speedup_vs_compiled"] = res["compiled_ms"] / o
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
