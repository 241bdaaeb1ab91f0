#!/usr/bin/env python3
"""Checkpoint save and load, fpgather against torch.distributed.checkpoint (DCP), same state, same disk,
same run (BENCHMARKS.md, "Checkpoints against DCP").

The state is a preset's training state at R data-parallel ranks: bf16 params, fp32 masters, AdamW's
exp_avg and exp_avg_sq (14 bytes a parameter), sharded over the ranks.

fpgather: `fpgather train --model M --dp R --steps 1 --micro-batch 1 --save ROOT --compress none`
  saves the state after one step (chunk checksums are always on); the JSON's checkpoints.save_seconds
  is the save's wall time (staging to every rank past the commit). Then the page cache is dropped and
  `fpgather train ... --load CKPT` restores it (checkpoints.load_seconds: index opened and validated,
  every rank's state read, both checksums of every chunk checked, decoded into the pipeline).
DCP: R processes (torch.multiprocessing, gloo), as torch's own distributed checkpoint tests and a
  real job run it: one process per rank, each holding its shard. R = 1: plain tensors; R > 1: each
  tensor flattened and sharded over a 1-D CPU device mesh as DTensor Shard(0) (FSDP2 / ZeRO-style
  flat shards; torch.chunk sizes). dcp.save with FileSystemWriter(thread_count=T, sync_files=True:
  fsynced like fpgather's commit) for each T of --dcp-threads (its default is 1; the figure compared is
  the fastest T); then the page cache is dropped and dcp.load into preallocated tensors of the same
  structure with FileSystemReader. Each time is rank 0's, from a barrier before to a barrier after.
  DCP writes no checksums. With R > 1 each process gets cpus/R intra-op threads, as ranks sharing
  a host under torchrun do.
The disk's own rates in the same run, for each case: a file of the state's size (at most 4 GB)
  written in 16 MiB blocks and fsynced, then read back cold; both tools' rates are also given as a
  fraction of these.

GB/s = the state's logical bytes / seconds, for both. Cold cache: /proc/sys/vm/drop_caches (root),
else every file of the checkpoint evicted with posix_fadvise(DONTNEED) after a sync.

Usage: bench_ckpt_dcp.py --fpgather build/fpgather --dir /tmp/ckpt-bench [--cases base:1,base:8,1b:1]
       [--dcp-threads 1,8] [--reps 1] [--json OUT]
"""
import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_step_torch import PRESETS, network_params  # noqa: E402

BYTES_PER_PARAM = 2 + 4 + 4 + 4  # bf16 param, fp32 master, exp_avg, exp_avg_sq


def drop_cache(path):
    """'drop_caches' or 'fadvise': how `path`'s pages were dropped."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for root, _, files in os.walk(path):
            for name in files:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
        return "fadvise"


def disk_rates(directory, nbytes):
    """The disk's own rates, GB/s: a file of nbytes (at most 4 GB) written in 16 MiB blocks and fsynced,
    then read back cold in 16 MiB blocks."""
    nbytes = min(nbytes, 4 << 30)
    block = os.urandom(16 << 20)
    path = os.path.join(directory, "disk-baseline.bin")
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, block[:min(left, len(block))])
        os.fsync(fd)
    finally:
        os.close(fd)
    write_s = time.perf_counter() - t0
    drop_cache(path)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 16 << 20):
            pass
    finally:
        os.close(fd)
    read_s = time.perf_counter() - t0
    os.unlink(path)
    return {"bytes": nbytes, "write_gbps": nbytes / write_s / 1e9, "read_gbps": nbytes / read_s / 1e9}


def fpgather_json(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def run_fpgather(binary, model, ranks, root):
    base = [binary, "--json", "--no-progress", "train", "--model", model, "--dp", str(ranks), "--steps", "1",
            "--micro-batch", "1", "--device", "cpu"]
    t0 = time.perf_counter()
    saved = fpgather_json(base + ["--save", root, "--compress", "none"])
    setup_s = time.perf_counter() - t0
    ckpt = saved["checkpoints"]["saved"][0]
    how = drop_cache(root)
    loaded = fpgather_json(base + ["--load", ckpt])
    return {"save_s": saved["checkpoints"]["save_seconds"][0], "load_s": loaded["checkpoints"]["load_seconds"],
            "stored_bytes": loaded["checkpoints"]["loaded_bytes"], "chunks": loaded["checkpoints"]["loaded_chunks"],
            "cold": how, "train_and_save_wall_s": setup_s}


# ---- DCP, one process per rank ----

def dcp_state(model, rank, ranks, fill):
    """This rank's state dict: {"model": {name: bf16}, "optim": {name: {master, exp_avg, exp_avg_sq}}},
    each tensor whole (ranks == 1) or a flat DTensor shard."""
    import torch
    mesh = None
    if ranks > 1:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (ranks,))
    gen = torch.Generator().manual_seed(rank)

    def make(shape, dtype):
        n = math.prod(shape)
        if ranks == 1:
            t = torch.empty(shape, dtype=dtype)
            if fill:
                t.copy_(torch.randn(shape, generator=gen))
            return t
        from torch.distributed.tensor import DTensor, Shard
        chunk = -(-n // ranks)
        lo, hi = min(n, rank * chunk), min(n, (rank + 1) * chunk)
        local = torch.empty(hi - lo, dtype=dtype)
        if fill:
            local.copy_(torch.randn(hi - lo, generator=gen))
        return DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size([n]), stride=(1,))

    model_sd, optim_sd = {}, {}
    for name, shape in network_params(PRESETS[model]):
        model_sd[name] = make(shape, torch.bfloat16)
        optim_sd[name] = {k: make(shape, torch.float32) for k in ("master", "exp_avg", "exp_avg_sq")}
    return {"model": model_sd, "optim": optim_sd}


def local_tensors(sd):
    for v in sd.values():
        if isinstance(v, dict):
            yield from local_tensors(v)
        else:
            yield v.to_local() if hasattr(v, "to_local") else v


def dcp_worker(rank, ranks, port, model, path, threads, result_file):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if ranks > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))  # as torchrun's ranks share the CPUs
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    try:
        sd = dcp_state(model, rank, ranks, fill=True)

        def timed(fn):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            dist.barrier()
            return time.perf_counter() - t0

        save_s = timed(lambda: dcp.save(sd, storage_writer=dcp.FileSystemWriter(path, thread_count=threads)))
        how = None
        if rank == 0:
            how = drop_cache(path)
        dist.barrier()
        dest = dcp_state(model, rank, ranks, fill=False)
        load_s = timed(lambda: dcp.load(dest, storage_reader=dcp.FileSystemReader(path)))
        same = all(torch.equal(a, b) for a, b in zip(local_tensors(sd), local_tensors(dest)))
        ok = torch.tensor([1 if same else 0])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if rank == 0:
            nbytes = sum(math.prod(s) for _, s in network_params(PRESETS[model])) * BYTES_PER_PARAM
            files = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
            with open(result_file, "w") as f:
                json.dump({"save_s": save_s, "load_s": load_s, "cold": how, "loaded_equal": bool(ok.item()),
                           "state_bytes": nbytes, "file_bytes": files, "thread_count": threads}, f)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_dcp(model, ranks, path, threads, scratch):
    import torch.multiprocessing as mp
    result = os.path.join(scratch, "dcp-result.json")
    mp.spawn(dcp_worker, args=(ranks, free_port(), model, path, threads, result), nprocs=ranks, join=True)
    with open(result) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fpgather", default="build/fpgather")
    ap.add_argument("--dir", default="/tmp/fpgather-ckpt-vs-dcp", help="scratch directory on the disk to measure "
                    "(created; removed at the end)")
    ap.add_argument("--cases", default="base:1,base:8,1b:1", help="comma list of PRESET:RANKS")
    ap.add_argument("--dcp-threads", default="1,8", help="FileSystemWriter thread_count values to run")
    ap.add_argument("--reps", type=int, default=1, help="repetitions of each measurement (medians)")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    if os.path.exists(a.dir):
        sys.exit(f"{a.dir} exists; give another --dir")
    os.makedirs(a.dir)
    import torch
    med = statistics.median
    rows = []
    try:
        print(f"ckpt vs DCP: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
              f"torch {torch.__version__}, dir {a.dir}; GB/s = state bytes / s")
        print(f"{'model':6} {'ranks':>5} {'state GB':>9} | {'fpgather save':>13} {'load':>6} | "
              f"{'DCP save':>9} {'load':>6} {'(T)':>5} | {'save x':>6} {'load x':>6}")
        for case in a.cases.split(","):
            model, ranks = case.split(":")
            ranks = int(ranks)
            state_bytes = sum(math.prod(s) for _, s in network_params(PRESETS[model])) * BYTES_PER_PARAM
            disk = disk_rates(a.dir, state_bytes)
            ours, theirs = [], {int(t): [] for t in a.dcp_threads.split(",")}
            for rep in range(a.reps):  # interleaved: fpgather, then DCP at each thread count
                root = os.path.join(a.dir, f"fpgather-{model}-{ranks}")
                ours.append(run_fpgather(a.fpgather, model, ranks, root))
                shutil.rmtree(root)
                for t in theirs:
                    path = os.path.join(a.dir, f"dcp-{model}-{ranks}-{t}")
                    theirs[t].append(run_dcp(model, ranks, path, t, a.dir))
                    shutil.rmtree(path)
            o_save = state_bytes / med(r["save_s"] for r in ours) / 1e9
            o_load = state_bytes / med(r["load_s"] for r in ours) / 1e9
            d = {t: (state_bytes / med(r["save_s"] for r in rs) / 1e9, state_bytes / med(r["load_s"] for r in rs) / 1e9)
                 for t, rs in theirs.items()}
            best_save_t = max(d, key=lambda t: d[t][0])
            best_load_t = max(d, key=lambda t: d[t][1])
            row = {"model": model, "ranks": ranks, "state_bytes": state_bytes, "fpgather": ours,
                   "dcp": {str(t): rs for t, rs in theirs.items()},
                   "fpgather_save_gbps": o_save, "fpgather_load_gbps": o_load,
                   "dcp_gbps": {str(t): {"save": s, "load": l} for t, (s, l) in d.items()},
                   "save_ratio": o_save / d[best_save_t][0], "load_ratio": o_load / d[best_load_t][1],
                   "disk": disk}
            rows.append(row)
            print(f"{model:6} {ranks:>5} {state_bytes / 1e9:>9.2f} | {o_save:>13.2f} {o_load:>6.2f} | "
                  f"{d[best_save_t][0]:>9.2f} {d[best_load_t][1]:>6.2f} {f'{best_save_t}/{best_load_t}':>5} | "
                  f"{row['save_ratio']:>6.2f} {row['load_ratio']:>6.2f}")
            print(f"{'':6} {'':>5} {'':>9}   disk ({disk['bytes'] / 1e9:.2f} GB file): write+fsync {disk['write_gbps']:.2f}, "
                  f"cold read {disk['read_gbps']:.2f} GB/s; of those, fpgather save {o_save / disk['write_gbps']:.2f} "
                  f"load {o_load / disk['read_gbps']:.2f}, DCP save {d[best_save_t][0] / disk['write_gbps']:.2f} "
                  f"load {d[best_load_t][1] / disk['read_gbps']:.2f}")
            for t, (s, l) in sorted(d.items()):
                print(f"{'':6} {'':>5} {'':>9}   DCP thread_count {t}: save {s:.2f}, load {l:.2f} GB/s")
            print(f"{'':6} {'':>5} {'':>9}   cold cache: {ours[0]['cold']}; fpgather stored {ours[0]['stored_bytes'] / 1e9:.2f} GB "
                  f"in {ours[0]['chunks']} chunks; DCP files {next(iter(theirs.values()))[0]['file_bytes'] / 1e9:.2f} GB, "
                  f"loaded equal: {all(r['loaded_equal'] for rs in theirs.values() for r in rs)}")
    finally:
        shutil.rmtree(a.dir, ignore_errors=True)
    print("(ratio = fpgather GB/s / the fastest DCP thread_count's; goal >= 1.5 both ways)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
