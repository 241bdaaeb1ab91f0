#!/usr/bin/env python3
"""torch's side of `fpgather bench dcp` (scripts/bench-dcp.sh): on the same checkpoint, the time torch
takes to read its .metadata (FileSystemReader.read_metadata: pickle.load of the file) and to validate
it (torch.distributed.checkpoint.default_planner._validate_global_plan, as DefaultSavePlanner's
_create_global_plan calls it), medians of --reps, and the memory the loaded metadata holds (and the
peak while loading it).

_validate_global_plan(global_plan, metadata) reads only len(global_plan) from the plan (the volume
rule applies when more than one rank saved): it is given one SavePlan per rank data file of the
checkpoint, as a save by that many ranks hands it. read_metadata runs with Python's garbage collector
enabled, as in torch; the time with it disabled is reported too (the faster of the two is what the
ratios use, so they do not flatter fpgather).

Usage: bench_dcp_torch.py CKPT [--reps N]   (prints JSON)
"""
import argparse
import gc
import json
import logging
import statistics
import sys
import time


def rss_bytes(field="VmRSS"):
    """VmRSS (resident now) or VmHWM (the peak since the last reset_peak) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak():
    """Resets VmHWM to the current RSS (Linux: 5 into /proc/self/clear_refs); False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def timed(reps, fn):
    """Wall and CPU seconds of each of `reps` calls; what a call returns is freed after its timing."""
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        del result
    return wall, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()

    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _validate_global_plan
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.checkpoint.planner import SavePlan

    # torch logs each problem it finds as a warning; a valid checkpoint has none.
    logging.getLogger("torch.distributed.checkpoint").setLevel(logging.ERROR)

    def read():
        return FileSystemReader(a.ckpt).read_metadata()

    def read_without_gc():
        gc.disable()
        try:
            return read()
        finally:
            gc.enable()

    gc.collect()
    peak_reset = reset_peak()
    before = rss_bytes()
    md = read()
    held = rss_bytes() - before
    peak = rss_bytes("VmHWM") - before

    read_s, read_cpu = timed(a.reps, read)
    read_nogc_s, read_nogc_cpu = timed(a.reps, read_without_gc)

    files = {info.relative_path for info in md.storage_data.values()}
    global_plan = [SavePlan(items=[]) for _ in range(max(2, len(files)))]
    errors = []
    def validate():
        # torch ≤ 2.11 returns whether the plan is valid; later versions the list of problems.
        result = _validate_global_plan(global_plan, md)
        errors.append(int(not result) if isinstance(result, bool) else len(result))

    validate_s, validate_cpu = timed(a.reps, validate)

    chunks = sum(len(v.chunks) for v in md.state_dict_metadata.values() if isinstance(v, TensorStorageMetadata))
    json.dump(
        {
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "chunks": chunks,
            "keys": len(md.state_dict_metadata),
            "global_plan_len": len(global_plan),
            "read_metadata_s": read_s,
            "read_metadata_median_s": statistics.median(read_s),
            "read_metadata_median_cpu_s": statistics.median(read_cpu),
            "read_metadata_nogc_s": read_nogc_s,
            "read_metadata_nogc_median_s": statistics.median(read_nogc_s),
            "read_metadata_nogc_median_cpu_s": statistics.median(read_nogc_cpu),
            "validate_s": validate_s,
            "validate_median_s": statistics.median(validate_s),
            "validate_median_cpu_s": statistics.median(validate_cpu),
            "validate_errors": errors[-1],
            "metadata_resident_bytes": held,
            "metadata_resident_bytes_per_chunk": held / chunks if chunks else 0,
            "metadata_peak_bytes": peak if peak_reset else None,
            "metadata_peak_bytes_per_chunk": peak / chunks if peak_reset and chunks else None,
        },
        sys.stdout,
        indent=2,
    )
    print()


if __name__ == "__main__":
    main()
