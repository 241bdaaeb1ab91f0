#!/usr/bin/env python3
"""Per-kernel time of one training step from an Nsight Compute CSV (BENCHMARKS.md, the step profiles).

Input: the CSV `ncu --metrics gpu__time_duration.sum --csv --log-file FILE fpgather train ... --steps N`
writes (one row per kernel launch and metric; lines before the header are ignored). One step is the
launches after the next-to-last optimizer launch (`fused_kernel`: AdamW/Lion, one per step) up to and
including the last one: the previous step's copy-back, gather and decode, then this step's
forward/backward, gradient norm and optimizer — every phase once.

Usage: ncu_step_breakdown.py CSV [--json OUT] [--top 12]
Prints a table of categories (ms, launches) and the largest kernels; exit 1 when the CSV has fewer
than two optimizer launches.
"""
import argparse
import csv
import json
import re
import sys
from collections import defaultdict

CATEGORIES = [  # first match wins
    ("optimizer (fused AdamW/Lion)", r"fused_kernel"),
    ("gradient norm and clip", r"\b(max_kernel|squares_kernel|scale_kernel)|grad_norm"),
    ("fp32 -> bf16 casts (copy-back, x, dy)", r"f32_to_bf16"),
    ("bf16 -> fp32 decode", r"bf16_to_f32"),
    ("rmsnorm", r"rmsnorm"),
    ("SwiGLU", r"swiglu"),
    ("loss (MSE)", r"mse_"),
    ("gradient accumulation add", r"add_inplace"),
    ("FP8 quantize/dequantize", r"fp8|amax|dequant|e4m3|e5m2"),
    ("NCCL", r"nccl"),
    ("GEMM (cuBLAS / cuBLASLt)", r"gemm|xmma|cutlass|nvjet|splitk|splitK|gemv|sm\d\d_|cublas"),
]
UNITS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}


def read_launches(path):
    """[(id, kernel name, ms)] in launch order."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header (a line starting with \"ID\")")
    rows = []
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        rows.append((int(r["ID"]), r["Kernel Name"], value * UNITS.get(r.get("Metric Unit", "nsecond"), 1e-6)))
    rows.sort()
    return rows


def category(name):
    for label, pattern in CATEGORIES:
        if re.search(pattern, name):
            return label
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--json")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    rows = read_launches(a.csv)
    opt = [i for i, (_, name, _) in enumerate(rows) if re.search(r"fused_kernel", name)]
    if len(opt) < 2:
        print(f"{a.csv}: {len(opt)} optimizer launches, need two (run two steps or more)", file=sys.stderr)
        return 1
    step = rows[opt[-2] + 1:opt[-1] + 1]
    total = sum(ms for _, _, ms in step)
    by_cat = defaultdict(lambda: [0.0, 0])
    by_kernel = defaultdict(lambda: [0.0, 0])
    for _, name, ms in step:
        c = by_cat[category(name)]
        c[0] += ms
        c[1] += 1
        short = re.sub(r"\(.*", "", name)[:90]
        k = by_kernel[short]
        k[0] += ms
        k[1] += 1
    print(f"one step: {len(step)} launches, {total:.3f} ms of kernel time")
    print(f"{'category':42} {'ms':>9} {'share':>7} {'launches':>9}")
    for label, (ms, n) in sorted(by_cat.items(), key=lambda kv: -kv[1][0]):
        print(f"{label:42} {ms:9.3f} {100 * ms / total:6.1f}% {n:9d}")
    print(f"\nlargest kernels (name up to its arguments):")
    for name, (ms, n) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"  {ms:8.3f} ms {n:5d}x  {name}")
    if a.json:
        json.dump({"launches": len(step), "total_ms": total,
                   "categories": {k: {"ms": v[0], "launches": v[1]} for k, v in by_cat.items()},
                   "kernels": {k: {"ms": v[0], "launches": v[1]} for k, v in by_kernel.items()}},
                  open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
