"""Compares two runs of load_at_parallelism.py that loaded one state at one target layout: fpgather's
output and Megatron's own save of the same state.

  python3 compare_loads.py OURS.json REFERENCE.json EXIT_OURS EXIT_REFERENCE

Prints one line: whether each loaded state equals the source's ground truth bitwise, the losses of the
steps trained after the load and their largest difference, and the state after the steps (weights,
masters, Adam moments from OURS.after.safetensors and REFERENCE.after.safetensors): how many tensors
are bitwise the same and the largest absolute and relative difference of the others. Exit 0 when both
loads equal the truth and the runs after them are identical (same losses, same state bit for bit: the
layout is the same, so the reduction order is too), else 1.
"""
import json
import os
import sys


def after_state(path):
    from safetensors.torch import load_file
    p = os.path.splitext(path)[0] + ".after.safetensors"
    return load_file(p) if os.path.exists(p) else None


def closeness(a, b):
    """(bitwise equal tensors, compared tensors, max |a - b|, max |a - b| / max(|b|, tiny))."""
    import torch
    same, total, diff, rel = 0, 0, 0.0, 0.0
    for name in sorted(set(a) | set(b)):
        total += 1
        x, y = a.get(name), b.get(name)
        if x is None or y is None or x.shape != y.shape or x.dtype != y.dtype:
            diff = rel = float("inf")
            continue
        if torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            same += 1
            continue
        d = (x.double() - y.double()).abs()
        diff = max(diff, d.max().item())
        rel = max(rel, (d / y.double().abs().clamp_min(1e-30)).max().item())
    return same, total, diff, rel


def main():
    ours_path, ref_path, exit_ours, exit_ref = sys.argv[1:5]
    try:
        a, b = (json.load(open(p)) for p in (ours_path, ref_path))
    except Exception as e:
        print(f"no result ({e}); exits {exit_ours} {exit_ref}")
        return 1
    la, lb = a["losses"], b["losses"]
    known = [(x, y) for x, y in zip(la, lb) if x is not None and y is not None]
    loss_diff = max((abs(x - y) for x, y in known), default=0.0)
    if all(x is None for x in la):
        losses = "losses: none (seeded gradients)"
    elif la == lb:
        losses = f"losses {la} identical"
    else:
        losses = f"losses {la} vs {lb} (max |diff| {loss_diff:.3g})"
    sa, sb = after_state(ours_path), after_state(ref_path)
    if sa is not None and sb is not None:
        same, total, diff, rel = closeness(sa, sb)
        after = (f"state after {len(la)} steps: {same}/{total} tensors identical" +
                 ("" if same == total else f", max |diff| {diff:.3g}, max rel {rel:.3g}"))
    else:
        same = total = 0
        after = f"state after the steps: {'the same' if a['state_sha256'] == b['state_sha256'] else 'DIFFERENT'} (sha)"
    identical = la == lb and a["state_sha256"] == b["state_sha256"]
    reduced = " (its chained common state reduced to the dense child's)" if b.get("chained_common_reduced") else ""
    print(f"fpgather's output: state equal {a['all_equal']} ({a['equal']}/{a['truth_tensors']}); "
          f"Megatron's own save{reduced}: {b['all_equal']} ({b['equal']}/{b['truth_tensors']}); {losses}; {after}")
    return 0 if a["all_equal"] and b["all_equal"] and identical else 1


if __name__ == "__main__":
    sys.exit(main())
