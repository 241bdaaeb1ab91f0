#!/usr/bin/env bash
# GPU benchmarks: each section runs fpgather's figure and its PyTorch baseline in the same
# call, on the same machine, and leaves logs / JSON in OUT_DIR (BENCHMARKS.md, "GPU").
#
#   bash scripts/gpu-bench.sh BUILD_DIR OUT_DIR SECTION...     sections: comm step-comm optim quantize overlap
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
BUILD=${1:?build directory}
OUT=${2:?output directory}
shift 2
mkdir -p "$OUT"

# NCCL all-gather / reduce-scatter bus bandwidth at a train step's bucket sizes, ours vs torch.distributed.
bench_comm() {
  "$BUILD/fpgather" --json bench comm --models base,1b --dp 2 --iters 20 >"$OUT/comm_ours.json" || return 1
  python3 scripts/bench_torch_comm.py --ours "$OUT/comm_ours.json" --iters 20 --json "$OUT/comm.json"
}

# The collectives inside `train --device cuda --dp 2` steps (train's defaults: one bucket per buffer,
# AdamW, bf16 params) against torch.distributed on the same sizes, same call: the reduce-scatter and
# gather phases time the step's collectives alone, so bytes / phase time is their in-step bus
# bandwidth. STEP_COMM_MODELS="base 1b", STEP_COMM_STEPS=6 by default.
bench_step_comm() {
  local models=${STEP_COMM_MODELS:-base 1b} steps=${STEP_COMM_STEPS:-6} m
  "$BUILD/fpgather" --json bench comm --models "${models// /,}" --dp 2 --iters 20 >"$OUT/step-comm_ours.json" || return 1
  python3 scripts/bench_torch_comm.py --ours "$OUT/step-comm_ours.json" --iters 20 --json "$OUT/step-comm_torch.json" \
    >/dev/null || return 1
  for m in $models; do
    "$BUILD/fpgather" --json --no-progress train --model "$m" --device cuda --dp 2 --steps "$steps" \
      >"$OUT/step-comm_train_$m.json" || return 1
  done
  python3 - "$OUT" $models <<'PY'
import json, sys
out, models = sys.argv[1], sys.argv[2:]
torch = json.load(open(f"{out}/step-comm_torch.json"))["results"]
phase = {"reduce_scatter": "reduce_scatter_ms", "all_gather": "gather_ms"}
print(f"{'model':6} {'op':15} {'total bytes':>14} {'in-step ms':>10} {'in-step busbw':>13} {'torch busbw':>11} {'ratio':>6}")
for m in models:
    ph = json.load(open(f"{out}/step-comm_train_{m}.json"))["phase_ms"]
    for t in (r for r in torch if r["model"] == m):
        ms = ph[phase[t["op"]]]
        busbw = t["total_bytes"] / (ms * 1e-3) / 1e9 / 2  # (N-1)/N at N = 2
        print(f"{m:6} {t['op']:15} {t['total_bytes']:14d} {ms:10.3f} {busbw:13.1f} {t['torch_busbw_gbps']:11.1f} "
              f"{busbw / t['torch_busbw_gbps']:6.3f}")
PY
}

# Fused AdamW/Lion, grad norm and Muon (cmd/bench/gpu_optim_bench.cpp) and the PyTorch baselines
# (scripts/bench_torch_optim.py) on the same shapes, same call. OPTIM_MODEL=base by default.
bench_optim() {
  local model=${OPTIM_MODEL:-base}
  "$BUILD/fpgather" --json bench gpu-optim --model "$model" >"$OUT/optim.json" 2>"$OUT/optim.err" \
    || { cat "$OUT/optim.err"; return 1; }
  python3 - "$OUT/optim.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']}, model {r['model']}: {len(r['param_shapes'])} fragments")
for x in r["results"]:
    print(f"{x['what']:10s} {x['shape']:12s} {x['median_ms']:9.3f} ms {x['gbps']:8.1f} GB/s ratio {x['ratio_to_copy']:.3f}"
          f" {x['tflops']:7.1f} TFLOP/s {x['gemm']}")
PY
  python3 scripts/bench_torch_optim.py --from "$OUT/optim.json" >"$OUT/optim-torch.json" 2>"$OUT/optim-torch.err"
  tail -12 "$OUT/optim-torch.err"
}

# FP8 quantize / batched copy-back (cmd/bench/gpu_quantize_bench.cpp) and the PyTorch baselines
# (scripts/bench_torch_quantize.py) on the same shapes, same call. QUANTIZE_MODEL=base by default.
bench_quantize() {
  local model=${QUANTIZE_MODEL:-base}
  "$BUILD/fpgather" --json bench gpu-quantize --model "$model" --shapes-json "$OUT/quantize-shapes.json" \
    >"$OUT/quantize.json" || return 1
  python3 - "$OUT/quantize.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']}: batch of {r['batch_params']} params, {r['batch_elements']} elements")
for x in r["results"]:
    print(f"{x['recipe']:20s} {x['pass']:10s} {x['median_ms']:9.3f} ms {x['gbps']:8.1f} GB/s  ratio {x['ratio_to_memcpy']:.3f}")
PY
  python3 scripts/bench_torch_quantize.py --shapes "$OUT/quantize-shapes.json" --ours "$OUT/quantize.json" \
    >"$OUT/quantize-torch.json"
  cat "$OUT/quantize-torch.json"
}

# train --model 1b --device cuda --dp 2 with the overlap options off / grad / param / both:
# the median step time and its phases of each run, and the ratio to "off". Megatron's 40M-element
# buckets so there is something to overlap. OVERLAP_STEPS=10 by default.
bench_overlap() {
  local steps=${OVERLAP_STEPS:-10} name flags
  for name in off grad param both; do
    case $name in
      off) flags=() ;;
      grad) flags=(--overlap-grad-reduce) ;;
      param) flags=(--overlap-param-gather) ;;
      both) flags=(--overlap-grad-reduce --overlap-param-gather) ;;
    esac
    "$BUILD/fpgather" --json --no-progress train --model 1b --device cuda --dp 2 --steps "$steps" \
      --bucket-size 40000000 "${flags[@]}" >"$OUT/overlap-$name.json" || return 1
  done
  python3 - "$OUT" <<'PY'
import json, sys
runs = {n: json.load(open(f"{sys.argv[1]}/overlap-{n}.json")) for n in ("off", "grad", "param", "both")}
base = runs["off"]["step_time_ms"]
for n, r in runs.items():
    ph = " ".join(f"{k[:-3]} {v:.2f}" for k, v in r.get("phase_ms", {}).items())
    same = r["final_loss"] == runs["off"]["final_loss"]
    print(f"overlap {n:5s} step {r['step_time_ms']:9.2f} ms  off/this {base / r['step_time_ms']:.3f}  "
          f"final loss {r['final_loss']:.6f} ({'same as' if same else 'DIFFERS from'} off)  [{ph}]")
PY
}

for s in "$@"; do
  case "$s" in
    comm) bench_comm ;;
    step-comm) bench_step_comm ;;
    optim) bench_optim ;;
    quantize) bench_quantize ;;
    overlap) bench_overlap ;;
    *) echo "gpu-bench: unknown section $s" >&2; exit 2 ;;
  esac
done
