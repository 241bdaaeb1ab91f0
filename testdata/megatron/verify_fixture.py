"""Checks a fixture folder of make_megatron_fixtures.py against its own checkpoint, without Megatron:
reads every tensor of FIXTURE/ckpt with torch.distributed.checkpoint (no process group) and compares,
bitwise, with truth.safetensors and truth.json:

  - model weights: each checkpoint key against the truth tensors of its layers/experts;
  - fully_reshardable: optimizer.state.{param|<state>}.KEY against NAME.master / NAME.<state>;
  - dp_reshardable: each [chained_i.]optimizer.distributed.dp_group_idx_G.gbuf_idx_g.dtype_….bucket_idx_b.<state>
    tensor, at each parameter's range as truth.json's ranks[*].optimizers describe it, against the
    holder's TP-local slice of the truth tensor (and that the tensor's length is the bucket's
    numel_unpadded).

  python3 verify_fixture.py FIXTURE [FIXTURE …]      (exit status 1 if any check fails)
"""
import json
import os
import re
import sys

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file


def read_ckpt(path):
    reader = dcp.FileSystemReader(path)
    md = reader.read_metadata()
    sd = {}
    for k, m in md.state_dict_metadata.items():
        if hasattr(m, "size"):
            sd[k] = torch.empty(tuple(m.size), dtype=m.properties.dtype)
    dcp.load(sd, storage_reader=dcp.FileSystemReader(path), no_dist=True)
    return sd


def local_of(truth, name, holder, suffix):
    """The holder's TP-local tensor (flat) of truth tensor NAME+suffix, from its pieces."""
    t = truth[name + suffix]
    n = 1
    for d in holder["local_shape"]:
        n *= d
    out = torch.empty(n, dtype=t.dtype)
    for pc in holder["pieces"]:
        sl = tuple(slice(o, o + s) for o, s in zip(pc["global_offset"], pc["local_shape"]))
        v = t[sl].reshape(-1)
        out[pc["local_flat_start"]:pc["local_flat_start"] + v.numel()] = v
    return out


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)) \
        if a.dtype == b.dtype else False


def verify(fixture):
    info = json.load(open(os.path.join(fixture, "truth.json")))
    truth = load_file(os.path.join(fixture, "truth.safetensors"))
    ck = read_ckpt(os.path.join(fixture, "ckpt"))
    sharding = info["config"].get("sharding")
    bad, checked = [], 0
    params = {p["name"]: p for p in info["params"]}
    by_key = {}
    for p in info["params"]:
        by_key.setdefault(p["ckpt_key"], []).append(p)
    state_prefix = "fp32_param" if info["config"].get("optimizer") == "muon" else "param"
    for key, plist in by_key.items():
        for suffix, ckey in [("", key)] + [(".master", f"optimizer.state.{state_prefix}.{key}")] + \
                [("." + s, f"optimizer.state.{s}.{key}") for s in plist[0]["states"]]:
            if suffix and sharding == "dp_reshardable" and info["config"].get("optimizer") != "muon":
                continue
            if ckey not in ck:  # a ChainedOptimizer's children, prefixed (LayerWise with dp_reshardable)
                ckey = next((f"chained_{i}.{ckey}" for i in range(8) if f"chained_{i}.{ckey}" in ck), ckey)
            if ckey not in ck:
                bad.append(f"missing {ckey}")
                continue
            g = ck[ckey]
            for p in plist:
                ix = tuple(p["prepended_index"])
                want = truth[p["name"] + suffix]
                got = g[ix] if ix else g
                if want.dtype != got.dtype:
                    got = got.to(want.dtype) if suffix else got
                checked += 1
                if not same(got.contiguous(), want):
                    bad.append(f"{ckey}{list(ix)} != {p['name']}{suffix}")
    if sharding == "dp_reshardable" and info["config"].get("optimizer") != "muon":
        nchained = max(len(r["optimizers"]) for r in info["ranks"])
        for r in info["ranks"]:
            for o in r["optimizers"]:
                if "gbufs" not in o:
                    continue
                pre = f"chained_{o['chained_index']}." if nchained > 1 else ""
                for g in o["gbufs"]:
                    for b in g["buckets"]:
                        base = f"{pre}optimizer.distributed.dp_group_idx_{o['dp_group_idx']}.gbuf_idx_{g['gbuf_idx']}" \
                               f".dtype_{b['dtype']}.bucket_idx_{b['bucket_idx']}"
                        for p in b["params"]:
                            holder = next(h for h in params[p["name"]]["holders"] if h["rank"] == r["rank"])
                            for st in ["param"] + params[p["name"]]["states"]:
                                ckey = f"{base}.{st}"
                                if ckey not in ck:
                                    bad.append(f"missing {ckey}")
                                    continue
                                t = ck[ckey]
                                if t.numel() != b["numel_unpadded"]:
                                    bad.append(f"{ckey}: {t.numel()} elements, bucket numel_unpadded {b['numel_unpadded']}")
                                s, e = p["gbuf_world_in_bucket"]
                                ps, pe = p["param"]
                                want = local_of(truth, p["name"], holder, ".master" if st == "param" else "." + st)[ps:pe]
                                checked += 1
                                if not same(t[s:e].contiguous(), want):
                                    bad.append(f"{ckey}[{s}:{e}] != {p['name']}.{st}[{ps}:{pe}] (rank {r['rank']})")
    # every truth tensor belongs to a parameter
    names = set()
    for p in info["params"]:
        names.add(p["name"])
        names.add(p["name"] + ".master")
        names.update(p["name"] + "." + s for s in p["states"])
    if names != set(truth):
        bad.append(f"truth tensors vs params: {sorted(set(truth) ^ names)[:5]}")
    print(f"{fixture}: {checked} comparisons, {len(bad)} failures" + "".join(f"\n  {b}" for b in bad[:10]), flush=True)
    return not bad


if __name__ == "__main__":
    ok = all([verify(f) for f in sys.argv[1:]])
    sys.exit(0 if ok else 1)
