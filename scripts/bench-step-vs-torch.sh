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
# bench_step_torch.py), PYTHON (python3, with torch), SEED (1234).
#
# Loss agreement (same weights and data, so step 0 is the same function on both sides):
#   - step 0's loss within 1e-4 relative for torch's fp32 mode (only the GEMMs' summation order
#     differs), within TOL_AMP for amp;
#   - every window of 10 steps, the mean loss within TOL_FP32 (1e-2) relative for torch's fp32 mode,
#     TOL_AMP (5e-2) for amp (bf16 GEMMs take another trajectory; the curve must still be the same
#     descent). Exit status 1 when a check fails.
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
  "$BUILD/fpgather" --json --no-progress "${glob[@]}" train --model "$p" "${ours[@]}" --steps "$STEPS" --seed "$SEED" \
    --metrics "$OUT/fpgather-$p.jsonl" >"$OUT/fpgather-$p.json" || { echo "fpgather train $p failed" >&2; exit 1; }
  "$PYTHON" scripts/bench_step_torch.py --model "$p" "${theirs[@]}" --steps "$STEPS" --warmup "$WARMUP" --seed "$SEED" \
    --runs "$RUNS" --json "$OUT/torch-$p.json" >/dev/null || { echo "torch $p failed" >&2; exit 1; }
done

"$PYTHON" - "$OUT" "$WARMUP" "${TOL_FP32:-1e-2}" "${TOL_AMP:-5e-2}" "${PRESETS[@]}" <<'PY'
import json, statistics, sys
out, warmup, tol_fp32, tol_amp, presets = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
med = statistics.median
ok = True
summary = []
for p in presets:
    steps = [json.loads(l) for l in open(f"{out}/fpgather-{p}.jsonl")]
    timed = steps[warmup:]
    ours = {"step_ms": med(s["times"]["step_ms"] for s in timed),
            **{k: med(s["times"][k] for s in timed) for k in
               ("forward_backward_ms", "optimizer_ms", "copy_back_ms", "decode_ms", "reduce_scatter_ms", "gather_ms")}}
    ours_loss = [s["loss"] for s in steps]
    t = json.load(open(f"{out}/torch-{p}.json"))
    print(f"\n== {p} ({t['params']:,} params), {t['device']}, torch {t['torch']}, {t['threads']} torch threads; "
          f"medians of steps {warmup}..{len(steps) - 1} (ms)")
    print(f"{'':22} {'step':>8} {'fwd/bwd':>8} {'optim':>8} {'copy-bk':>8} {'decode':>8} {'speedup':>8}  loss 0 / last   check")
    print(f"{'fpgather':22} {ours['step_ms']:8.3f} {ours['forward_backward_ms']:8.3f} {ours['optimizer_ms']:8.3f} "
          f"{ours['copy_back_ms']:8.3f} {ours['decode_ms']:8.3f} {'':>8}  {ours_loss[0]:.6f} / {ours_loss[-1]:.6f}")
    fastest = min(r["step_ms"] for r in t["results"])
    rows = []
    for r in t["results"]:
        ph = r["phase_ms"]
        tl = r["losses"]
        n = min(len(tl), len(ours_loss))
        tol = tol_fp32 if r["mode"] == "fp32" else tol_amp
        rel0 = abs(tl[0] - ours_loss[0]) / abs(ours_loss[0])
        windows = [abs(sum(tl[i:i + 10]) - sum(ours_loss[i:i + 10])) / abs(sum(ours_loss[i:i + 10]))
                   for i in range(0, n - 9, 10)] or [abs(tl[n - 1] - ours_loss[n - 1]) / abs(ours_loss[n - 1])]
        passed = rel0 <= (1e-4 if r["mode"] == "fp32" else tol) and max(windows) <= tol
        ok &= passed
        name = f"torch {r['mode']} {r['variant']}"
        print(f"{name:22} {r['step_ms']:8.3f} {ph['forward_backward_ms']:8.3f} {ph['optimizer_ms']:8.3f} "
              f"{ph['copy_back_ms']:8.3f} {ph['decode_ms']:8.3f} {r['step_ms'] / ours['step_ms']:7.2f}x  "
              f"{tl[0]:.6f} / {tl[n - 1]:.6f}   step 0 {rel0:.1e}, windows max {max(windows):.1e} "
              f"(tol {tol:g}) {'ok' if passed else 'FAIL'}")
        rows.append({**r, "losses": None, "speedup_of_fpgather": r["step_ms"] / ours["step_ms"],
                     "loss_step0_rel": rel0, "loss_window_rel_max": max(windows), "loss_ok": passed})
    print(f"{'fpgather over the fastest torch':32} {fastest / ours['step_ms']:.2f}x (goal >= 1.5)")
    summary.append({"model": p, "fpgather": ours, "torch": rows, "speedup_over_fastest": fastest / ours["step_ms"]})
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(f"\nloss curves: {'agree' if ok else 'DISAGREE'}; figures in {out}/summary.json")
sys.exit(0 if ok else 1)
PY
