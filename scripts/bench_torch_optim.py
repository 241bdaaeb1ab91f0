#!/usr/bin/env python3
"""PyTorch baselines for `fpgather bench gpu-optim`, on the same shapes, timed the same way (CUDA events,
warm-up, median of --iters steps):

  adamw  torch.optim.AdamW(fused=True) over the model's parameters (one fp32 tensor each)
  muon   torch.optim.Muon (torch >= 2.9) over each listed matrix, and over the model's Muon matrices

Shapes come from fpgather's JSON (`fpgather --json bench gpu-optim > ours.json`; --from ours.json), so
both sides time the same tensors; the output JSON then also holds ours / torch speedups.
"""
import argparse
import json
import sys

import torch


def time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    ms.sort()
    return ms[len(ms) // 2], ms[0]


def make_params(shapes, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ps = []
    for sh in shapes:
        p = torch.nn.Parameter(torch.randn(*sh, device="cuda", generator=g) * 0.02)
        p.grad = torch.randn(*sh, device="cuda", generator=g) * 1e-3
        ps.append(p)
    return ps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="ours", required=True, help="fpgather bench gpu-optim --json output")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    out = {"benchmark": "torch-optim", "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "results": []}

    params = make_params([tuple(s) for s in ours["param_shapes"]], 1)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, fused=True)
    med, best = time_ms(opt.step, a.warmup, a.iters)
    out["results"].append({"what": "adamw", "shape": "", "median_ms": med, "min_ms": best})
    del opt, params
    torch.cuda.empty_cache()

    cases = [("%dx%d" % tuple(s), [tuple(s)]) for s in ours["muon_shapes"]]
    if ours.get("model_muon_shapes"):
        cases.append(("model", [tuple(s) for s in ours["model_muon_shapes"]]))
    if hasattr(torch.optim, "Muon"):
        for label, shapes in cases:
            params = make_params(shapes, 2)
            opt = torch.optim.Muon(params)  # torch's defaults = fpgather's MuonHyper defaults
            med, best = time_ms(opt.step, a.warmup, a.iters)
            out["results"].append({"what": "muon", "shape": label, "median_ms": med, "min_ms": best})
            del opt, params
            torch.cuda.empty_cache()
    else:
        out["muon_skipped"] = "torch %s has no torch.optim.Muon" % torch.__version__

    ours_ms = {(r["what"], r["shape"]): r["median_ms"] for r in ours["results"]}
    for r in out["results"]:
        mine = ours_ms.get((r["what"], r["shape"]))
        if mine:
            r["fpgather_ms"] = mine
            r["speedup"] = r["median_ms"] / mine  # >= 1: fpgather is at least as fast
    json.dump(out, sys.stdout, indent=2)
    print()
    for r in out["results"]:
        print("%-6s %-12s torch %9.3f ms  fpgather %9.3f ms  speedup %.2fx" %
              (r["what"], r["shape"], r["median_ms"], r.get("fpgather_ms", float("nan")), r.get("speedup", float("nan"))),
              file=sys.stderr)


if __name__ == "__main__":
    main()
