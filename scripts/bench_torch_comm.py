#!/usr/bin/env python3
"""torch.distributed (NCCL) baseline of `fpgather bench comm`: the same all-gather and reduce-scatter
sizes, timed the same way (barrier, CUDA events around the collective on the current stream, 5
warm-up iterations, median of --iters), on --dp local GPUs via torch.multiprocessing.spawn.

  fpgather bench comm --json > ours.json
  python3 scripts/bench_torch_comm.py --ours ours.json [--json torch.json]

Prints per size torch's bus bandwidth, ours, and ours / torch. Sizes come from ours.json (its
`results`), so both sides time exactly the same collectives. Exits 77 without CUDA/NCCL or with fewer
GPUs than --dp.
"""
import argparse
import json
import os
import sys


def worker(rank, world, rows, iters, port, out_path):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    biggest = max(r["total_bytes"] for r in rows)
    buf = torch.zeros(max(biggest, 1), dtype=torch.uint8, device="cuda")
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    results = []
    for r in rows:
        shard = r["shard_bytes"]
        if r["op"] == "all_gather":
            full = buf[: shard * world]
            mine = full[rank * shard : (rank + 1) * shard]
            op = lambda: dist.all_gather_into_tensor(full, mine)
        else:
            dt = torch.float32 if r["dtype"] == "f32" else torch.bfloat16
            full = buf[: shard * world].view(dt)
            n = full.numel() // world
            mine = full[rank * n : (rank + 1) * n]
            op = lambda: dist.reduce_scatter_tensor(mine, full)
        ms = []
        for it in range(5 + iters):
            dist.barrier()
            torch.cuda.synchronize()
            t0.record()
            op()
            t1.record()
            t1.synchronize()
            if it >= 5:
                ms.append(t0.elapsed_time(t1))
        ms.sort()
        med = ms[len(ms) // 2] if len(ms) % 2 else 0.5 * (ms[len(ms) // 2 - 1] + ms[len(ms) // 2])
        algbw = r["total_bytes"] / (med * 1e-3) / 1e9 if med > 0 else 0.0
        results.append(dict(r, median_ms=med, algbw_gbps=algbw, busbw_gbps=algbw * (world - 1) / world))
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True, help="`fpgather bench comm --json` output (sizes and our figures)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", help="also write the comparison as JSON here")
    a = ap.parse_args()
    with open(a.ours) as f:
        ours = json.load(f)
    world = int(ours["dp"])
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"bench_torch_comm: torch missing ({e}); skipped")
        return 77
    if not torch.cuda.is_available() or torch.cuda.device_count() < world or not dist.is_nccl_available():
        print(f"bench_torch_comm: needs {world} CUDA devices and NCCL; skipped")
        return 77
    rows = [{k: r[k] for k in ("model", "op", "dtype", "shard_bytes", "total_bytes")} for r in ours["results"]]
    out_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_torch_comm.{os.getpid()}.json")
    mp.spawn(worker, args=(world, rows, a.iters, 29500 + os.getpid() % 1000, out_path), nprocs=world, join=True)
    with open(out_path) as f:
        torch_rows = json.load(f)
    os.unlink(out_path)
    print(f"torch {torch.__version__} NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, dp {world}, "
          f"median of {a.iters}; bus bandwidth GB/s")
    print(f"{'model':8} {'op':15} {'dtype':5} {'total bytes':>14} {'torch':>9} {'ours':>9} {'ratio':>7}")
    table = []
    for t, o in zip(torch_rows, ours["results"]):
        ratio = o["busbw_gbps"] / t["busbw_gbps"] if t["busbw_gbps"] > 0 else 0.0
        print(f"{t['model']:8} {t['op']:15} {t['dtype']:5} {t['total_bytes']:14d} {t['busbw_gbps']:9.1f} "
              f"{o['busbw_gbps']:9.1f} {ratio:7.3f}")
        table.append({"model": t["model"], "op": t["op"], "dtype": t["dtype"], "total_bytes": t["total_bytes"],
                      "torch_busbw_gbps": t["busbw_gbps"], "torch_median_ms": t["median_ms"],
                      "ours_busbw_gbps": o["busbw_gbps"], "ours_median_ms": o["median_ms"], "ratio": ratio})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "comm", "dp": world, "iters": a.iters, "results": table}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
