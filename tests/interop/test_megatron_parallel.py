#!/usr/bin/env python3
"""Megatron-Core torch_dist checkpoints saved at TP/PP/EP/DP > 1 (testdata/megatron/parallel, written
by Megatron itself: make_megatron_fixtures.py) against the ground truth the generator took from
Megatron's optimizer on every rank (truth.json, truth.safetensors):

  - `inspect --json` recovers the parallel sizes of the run and, for dp_reshardable, every optimizer
    group's buffer layout exactly as each rank's DDP buffers held it (buckets, param ranges), its DP
    size and which storage file holds which DP rank;
  - `validate --data` finds no problem; `diff` of the two forms of one run is equal;
  - `convert --states --dtype fp32` gives every NAME.master and NAME.<state> byte for byte, and
    `convert --dtype bf16` every bf16 weight.

The files are read by the safetensors layout alone (no framework needed)."""
import json
import os
import struct
import subprocess
import sys
import tempfile

FPGATHER = os.environ.get("FPGATHER", "fpgather")
TESTDATA = os.environ["TESTDATA"]
ROOT = os.path.join(TESTDATA, "megatron", "parallel")
DTYPES = {"torch.bfloat16": "BF16", "torch.float32": "F32", "torch.float16": "F16"}
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def run(*args, code=0):
    p = subprocess.run([FPGATHER, "--no-progress", *args], capture_output=True, text=True)
    check(p.returncode == code, f"{' '.join(args)}: exit {p.returncode}, want {code}: {p.stderr.strip()[:400]}")
    return p.stdout


def raw_tensors(path):
    """{name: (dtype, shape, bytes)} from a safetensors file, by its documented layout."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def group_for(groups, chained, index, kind):
    """Our group for a rank's optimizer (chained_index, dp_group_idx) of kind dense/expert."""
    for g in groups:
        if g["index"] == index and g["expert"] == (kind == "expert"):
            pre = g["prefix"]
            if not pre.startswith("chained_") or pre.startswith(f"chained_{chained}."):
                return g
    return None


def check_layouts(case, truth, parallel):
    """Each rank's DDP buffers equal the layout of the group that rank's optimizer belongs to."""
    groups = parallel["groups"]
    seen = set()
    for rank in truth["ranks"]:
        opts = rank["optimizers"]
        by_kind = {"dense": [b for b in rank["buffers"] if b["kind"] == "dense"],
                   "expert": [b for b in rank["buffers"] if b["kind"] == "expert"]}
        for kind, buffers in by_kind.items():
            if not buffers:
                continue
            opt = opts[1 if kind == "expert" else 0]
            g = group_for(groups, opt["chained_index"], opt["dp_group_idx"], kind)
            check(g is not None, f"{case}: rank {rank['rank']}: a {kind} group {opt['dp_group_idx']}")
            if g is None:
                continue
            seen.add(g["prefix"])
            check(g["dp"] == opt["dp_world_size"], f"{case}: {g['prefix']}: dp {g['dp']} vs {opt['dp_world_size']}")
            files = g["rank_files"]
            if rank["rank"] in files:
                check(files.index(rank["rank"]) == opt["dp_rank"], f"{case}: {g['prefix']}: rank {rank['rank']} "
                      f"is DP rank {opt['dp_rank']}")
            ours = g["layout"]["buffers"]
            check(len(ours) == len(buffers), f"{case}: {g['prefix']}: {len(ours)} buffers vs {len(buffers)}")
            for b, (o, t) in enumerate(zip(ours, buffers)):
                what = f"{case}: {g['prefix']} buffer {b}"
                check((o["param_dtype"], o["grad_dtype"]) == (DTYPES[t["param_dtype"]], DTYPES[t["grad_dtype"]]),
                      f"{what}: dtypes")
                check(o["numel"] == t["numel"], f"{what}: numel {o['numel']} vs {t['numel']}")
                want_buckets = [(k["offset"], k["offset"] + k["numel"], k["numel_unpadded"]) for k in t["buckets"]]
                got_buckets = [(k["start"], k["end"], k["numel_unpadded"]) for k in o["buckets"]]
                check(got_buckets == want_buckets, f"{what}: buckets {got_buckets} vs {want_buckets}")
                # A tied output layer's copy on the last stage is checkpointed under the embedding's key;
                # the layout names it as Megatron registers it.
                want = sorted(("output_layer.weight" if p["module_name"].endswith("output_layer.weight") else p["name"],
                               p["start"], p["end"]) for k in t["buckets"] for p in k["params"])
                got = sorted((p["name"], p["start"], p["end"]) for p in o["params"])
                check(got == want, f"{what}: param ranges {got[:3]}… vs {want[:3]}…")
    check(seen == {g["prefix"] for g in groups}, f"{case}: every group is some rank's: {sorted(seen)}")
    print(f"{case}: {len(seen)} optimizer group layouts equal the ranks' buffers")


def check_export(case, ckpt, truth_path, tmp):
    truth = raw_tensors(truth_path)
    compared = 0
    for dtype, states in (("fp32", True), ("bf16", False)):
        out = os.path.join(tmp, f"{case}-{dtype}.safetensors")
        run("convert", ckpt, out, "--dtype", dtype, *(["--states"] if states else []))
        got = raw_tensors(out)
        for name, (dt, shape, data) in got.items():
            suffix = name.rsplit(".", 1)[1]
            if suffix in ("master", "exp_avg", "exp_avg_sq", "momentum_buffer"):
                want = truth.get(name)
            elif dtype == "bf16":
                want = truth.get(name)
                if want and want[0] == "F32":  # an fp32-held parameter (norm) exports rounded to bf16
                    continue
            else:
                want = truth.get(name + ".master") or truth.get(name)
            check(want is not None, f"{case}: {name} has a ground truth")
            if want:
                check((dt, shape) == (want[0], want[1]), f"{case}: {name} {dt}{shape} vs {want[0]}{want[1]}")
                check(data == want[2], f"{case}: {name} ({dtype}) bytes equal the ground truth")
                compared += 1
        if states:
            missing = [n for n in truth if "." in n and n.rsplit(".", 1)[1] in ("master", "exp_avg", "exp_avg_sq",
                                                                                "momentum_buffer") and n not in got]
            check(not missing, f"{case}: states exported: missing {missing[:4]}")
    return compared


with tempfile.TemporaryDirectory() as tmp:
    cases = sorted(c for c in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, c, "ckpt")))
    check(len(cases) >= 16, f"fixtures present: {len(cases)}")
    for case in cases:
        ckpt = os.path.join(ROOT, case, "ckpt")
        truth = json.load(open(os.path.join(ROOT, case, "truth.json")))
        cfg = truth["config"]
        summary = json.loads(run("--json", "inspect", ckpt))
        check(summary["model_keys"]["tp"] == cfg["tp"], f"{case}: model keys at TP {summary['model_keys']['tp']}")
        check(summary["model_keys"]["experts"] == (cfg["experts"] or 0), f"{case}: experts")
        distributed = any(o["class"] == "DistributedOptimizer" for r in truth["ranks"] for o in r["optimizers"])
        if cfg["sharding"] == "dp_reshardable" and distributed:
            p = summary["parallel"]
            want = {"tp": cfg["tp"], "pp": cfg["pp"], "dp": cfg["dp"], "ep": cfg.get("ep") or 1}
            check({k: p[k] for k in want} == want, f"{case}: parallel sizes {p} vs {want}")
            layers = cfg["layers"]
            check(sum(p["stage_layers"]) == layers and len(p["stage_layers"]) == cfg["pp"],
                  f"{case}: stages {p['stage_layers']}")
            if cfg.get("first_stage_layers"):
                check(p["stage_layers"][0] == cfg["first_stage_layers"], f"{case}: first stage {p['stage_layers']}")
            check_layouts(case, truth, p)
        else:
            check(summary.get("parallel") is None, f"{case}: model-space form has no optimizer groups")
        report = json.loads(run("--json", "validate", "--data", ckpt))
        check(report.get("problems") == [], f"{case}: validate --data problems {report.get('problems')}")
        n = check_export(case, ckpt, os.path.join(ROOT, case, "truth.safetensors"), tmp)
        print(f"{case}: {n} tensors bitwise equal to Megatron's")
    for case in cases:
        if case.endswith("-dp_reshardable"):
            other = case[: -len("dp_reshardable")] + "fully_reshardable"
            if other in cases:
                run("diff", os.path.join(ROOT, case, "ckpt"), os.path.join(ROOT, other, "ckpt"))

if failures:
    print(f"{failures} check(s) failed")
    sys.exit(1)
print("all checks passed")
