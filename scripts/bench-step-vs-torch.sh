#!/usr/bin/env bash
# The whole training step against PyTorch, same machine, same call (BENCHMARKS.md, "Step against
# PyTorch"): for each preset, `fpgather train` and scripts/bench_step_torch.py run the same network,
# the same initial weights and data (fpgather's Philox streams, rebuilt in the script), AdamW, clip 1.0,
# micro-batch 32, for the same steps; then a table of median step times and phases, and a check that
# the loss curves agree.
#
#   bash scripts/bench-step-vs-torch.sh BUILD_DIR OUT_DIR [PRESET...]     (default presets: base 1b)
#
# GPU (default): `fpgather train --device cuda --dp 1` against torch on cuda.
# CPU (CPU=1): `fpgather train --device cpu --dp T --micro-batch 32/T --threads T` (T = THREADS,
# default 2: one rank a thread, each on its half of the micro-batch; the same samples, loss and
# averaged gradient as dp 1 at micro-batch 32) against torch with torch.set_num_threads(T).
# Environment: STEPS (60), WARMUP (10; steps left out of the medians, compilation included),
# RUNS (torch's MODE:VARIANT list, default fp32:eager,fp32:compile,amp:eager,amp:compile; see
# bench_step_torch.py), COMPUTE (fpgather's --compute list, default fp32; e.g. fp32,bf16: one
# fpgather run each, a row each), PYTHON (python3, with torch), SEED (1234).
#
# Loss agreement (same weights and data, so step 0 is the same function on both sides):
#   - step 0's loss within 1e-4 relative for torch's fp32 mode (only the GEMMs' summation order
#     differs), within TOL_AMP for amp;
#   - every window of 10 steps, the mean loss within TOL_FP32 (1e-2) relative for torch's fp32 mode,
#     TOL_AMP (5e-2) for amp (bf16 GEMMs take another trajectory; the curve must still be the same
#     descent). Torch's fp32 rows are checked against fpgather's fp32 run, its amp rows against
#     fpgather's bf16 run where COMPUTE has one (else fp32); fpgather bf16 against fpgather fp32 by the
#     amp bounds. Exit status 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?build directory}
OUT=${2:?output directory}
shift 2
PRESETS=("$@")
[ ${#PRESETS[@]} -gt 0 ] || PRESETS=(base 1b)
STEPS=${STEPS:-60}
WARMUP=${WARMUP:-10}
RUNS=${RUNS:-fp32:eager,fp32:compile,amp:eager,amp:compile}
COMPUTE=${COMPUTE:-fp32}
PYTHON=${PYTHON:-python3}
SEED=${SEED:-1234}
mkdir -p "$OUT"

if [ "${CPU:-0}" = 1 ]; then
  T=${THREADS:-2}
  [ $((32 % T)) = 0 ] || { echo "THREADS must divide the micro-batch 32" >&2; exit 2; }
  ours=(--device cpu --dp "$T" --micro-batch $((32 / T)))
  theirs=(--device cpu --threads "$T")
  glob=(--threads "$T")
  where="cpu, $T threads"
else
  ours=(--device cuda --dp 1 --micro-batch 32)
  theirs=(--device cuda)
  glob=()
  where="cuda"
fi

echo "bench-step-vs-torch: $(date -u '+%Y-%m-%d %H:%M UTC'), $where, steps $STEPS (warm-up $WARMUP), load $(cut -d' ' -f1-3 /proc/loadavg)"
for p in "${PRESETS[@]}"; do
  for c in ${COMPUTE//,/ }; do
    "$BUILD/fpgather" --json --no-progress "${glob[@]}" train --model "$p" "${ours[@]}" --compute "$c" --steps "$STEPS" \
      --seed "$SEED" --metrics "$OUT/fpgather-$p-$c.jsonl" --force >"$OUT/fpgather-$p-$c.json" ||
      { echo "fpgather train $p --compute $c failed" >&2; exit 1; }
  done
  "$PYTHON" scripts/bench_step_torch.py --model "$p" "${theirs[@]}" --steps "$STEPS" --warmup "$WARMUP" --seed "$SEED" \
    --runs "$RUNS" --json "$OUT/torch-$p.json" >/dev/null || { echo "torch $p failed" >&2; exit 1; }
done

"$PYTHON" - "$OUT" "$WARMUP" "${TOL_FP32:-1e-2}" "${TOL_AMP:-5e-2}" "$COMPUTE" "${PRESETS[@]}" <<'PY'
import json, statistics, sys
out, warmup, tol_fp32, tol_amp = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
computes, presets = sys.argv[5].split(","), sys.argv[6:]
med = statistics.median
ok = True
summary = []


def compare(theirs, ours, fp32):
    """(step 0 relative difference, max over 10-step windows of the mean's relative difference, passed)."""
    n = min(len(theirs), len(ours))
    tol = tol_fp32 if fp32 else tol_amp
    rel0 = abs(theirs[0] - ours[0]) / abs(ours[0])
    windows = [abs(sum(theirs[i:i + 10]) - sum(ours[i:i + 10])) / abs(sum(ours[i:i + 10]))
               for i in range(0, n - 9, 10)] or [abs(theirs[n - 1] - ours[n - 1]) / abs(ours[n - 1])]
    return rel0, max(windows), rel0 <= (1e-4 if fp32 else tol) and max(windows) <= tol


for p in presets:
    t = json.load(open(f"{out}/torch-{p}.json"))
    ours = {}
    for c in computes:
        steps = [json.loads(l) for l in open(f"{out}/fpgather-{p}-{c}.jsonl")]
        timed = steps[warmup:]
        ours[c] = {"step_ms": med(s["times"]["step_ms"] for s in timed),
                   **{k: med(s["times"][k] for s in timed) for k in
                      ("forward_backward_ms", "optimizer_ms", "copy_back_ms", "decode_ms", "reduce_scatter_ms",
                       "gather_ms")},
                   "losses": [s["loss"] for s in steps]}
    print(f"\n== {p} ({t['params']:,} params), {t['device']}, torch {t['torch']}, {t['threads']} torch threads; "
          f"medians of steps {warmup}..{len(ours[computes[0]]['losses']) - 1} (ms)")
    speed_heads = " ".join(f"{'vs ' + c:>8}" for c in computes)
    print(f"{'':22} {'step':>8} {'fwd/bwd':>8} {'optim':>8} {'copy-bk':>8} {'decode':>8} {speed_heads}  loss 0 / last   check")
    blank = " ".join(f"{'':>8}" for _ in computes)
    for c in computes:
        o = ours[c]
        line = (f"{'fpgather ' + c:22} {o['step_ms']:8.3f} {o['forward_backward_ms']:8.3f} {o['optimizer_ms']:8.3f} "
                f"{o['copy_back_ms']:8.3f} {o['decode_ms']:8.3f} {blank}  {o['losses'][0]:.6f} / {o['losses'][-1]:.6f}")
        if c != "fp32" and "fp32" in ours:  # a mixed-precision curve against fpgather's own fp32 one
            rel0, wmax, passed = compare(o["losses"], ours["fp32"]["losses"], False)
            ok &= passed
            o["vs_fp32"] = {"loss_step0_rel": rel0, "loss_window_rel_max": wmax, "loss_ok": passed}
            line += f"   vs fp32: step 0 {rel0:.1e}, windows max {wmax:.1e} (tol {tol_amp:g}) {'ok' if passed else 'FAIL'}"
        print(line)
    fastest = min(r["step_ms"] for r in t["results"])
    rows = []
    for r in t["results"]:
        ph = r["phase_ms"]
        fp32 = r["mode"] == "fp32"
        ref = "fp32" if fp32 or "bf16" not in ours else "bf16"
        if ref not in ours:
            ref = computes[0]
        rel0, wmax, passed = compare(r["losses"], ours[ref]["losses"], fp32 and ref == "fp32")
        ok &= passed
        speed = " ".join(f"{r['step_ms'] / ours[c]['step_ms']:7.2f}x" for c in computes)
        name = f"torch {r['mode']} {r['variant']}"
        n = min(len(r["losses"]), len(ours[ref]["losses"]))
        print(f"{name:22} {r['step_ms']:8.3f} {ph['forward_backward_ms']:8.3f} {ph['optimizer_ms']:8.3f} "
              f"{ph['copy_back_ms']:8.3f} {ph['decode_ms']:8.3f} {speed}  "
              f"{r['losses'][0]:.6f} / {r['losses'][n - 1]:.6f}   vs fpgather {ref}: step 0 {rel0:.1e}, windows max "
              f"{wmax:.1e} (tol {tol_fp32 if fp32 and ref == 'fp32' else tol_amp:g}) {'ok' if passed else 'FAIL'}")
        rows.append({**r, "losses": None,
                     "speedup_of_fpgather": {c: r["step_ms"] / ours[c]["step_ms"] for c in computes},
                     "loss_checked_against": ref, "loss_step0_rel": rel0, "loss_window_rel_max": wmax,
                     "loss_ok": passed})
    for c in computes:
        print(f"{'fpgather ' + c + ' over the fastest torch':40} {fastest / ours[c]['step_ms']:.2f}x (goal >= 1.5)")
    summary.append({"model": p, "fpgather": {c: {k: v for k, v in o.items() if k != "losses"} for c, o in ours.items()},
                    "torch": rows,
                    "speedup_over_fastest": {c: fastest / ours[c]["step_ms"] for c in computes}})
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(f"\nloss curves: {'agree' if ok else 'DISAGREE'}; figures in {out}/summary.json")
sys.exit(0 if ok else 1)
PY
