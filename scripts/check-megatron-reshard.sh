#!/usr/bin/env bash
# Megatron-Core resumes from fpgather's reshard at another parallelism:
#  - model: each model-parallel fixture's dp_reshardable checkpoint is rewritten
#    `--to fully_reshardable` and loaded at a TP/PP/DP other than the one it was saved at;
#  - buckets: a fixture's dp_reshardable checkpoint is rewritten `--dp N` (every optimizer group's
#    buckets laid out again for N ranks, same TP × PP) and loaded as dp_reshardable at that DP;
#  - parallel: a fixture rewritten `--tp/--pp [--dp] [--bucket-size]` (every parameter cut again
#    for the new ranks, their buckets laid out as Megatron lays them out there) and loaded as
#    dp_reshardable at those sizes;
#  - ep: a MoE fixture rewritten `--ep N` and loaded as dp_reshardable at that EP.
# A dp_reshardable load succeeds only in the exact bucket layout Megatron computes itself, so each
# load proves the layout of every group. Each load (testdata/megatron/load_at_parallelism.py,
# Megatron-Core 0.19.2, 1-4 processes on one GPU over gloo) compares the loaded state bitwise with the
# source's ground truth and trains 2 steps; the same load of Megatron's own fully_reshardable save of
# that state at the same sizes, beside it, must give the same losses and the same state after the
# steps (testdata/megatron/compare_loads.py says how close where not).
#
# Usage: scripts/check-megatron-reshard.sh FPGATHER OUT_DIR   (needs a GPU, torch, and .whl/ as
# scripts/gen-megatron-fixtures.sh describes). ONLY="model buckets parallel ep" (any of them; default
# all) picks the kinds, TAGS (space-separated) single cases, JOBS (default 3) how many comparisons run
# at once, PYTHON the interpreter (with Megatron-Core importable, .whl/ is not installed). Prints one
# line per case and a count; exit 1 if any differs. FIXTURES_CPU_DEBUG=1 runs the loads on the CPU
# (testdata/megatron/cpu_debug.py), for developing the harness only.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FPGATHER=${1:?usage: check-megatron-reshard.sh FPGATHER OUT_DIR}
OUT=${2:?usage: check-megatron-reshard.sh FPGATHER OUT_DIR}
ONLY=${ONLY:-model buckets parallel ep}
JOBS=${JOBS:-3}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
# Megatron-Core from .whl/ unless this Python already has it.
"$PY" -c "import megatron.core" 2>/dev/null || source scripts/megatron-site.sh
M=testdata/megatron/parallel
t0=$(date +%s)

# Each case: TAG|KIND|SOURCE|RESHARD OPTIONS|LOAD SIZES. SOURCE is a fixture configuration (its
# dp_reshardable save is rewritten; its truth and its fully_reshardable save are the reference) or
# @TAG, an earlier case's output (rewritten again; that case's source is the reference).
CASES=(
  # model: --to fully_reshardable, loaded at another TP/PP/DP.
  "tp2pp2-model-tp1pp1|model|tp2pp2-dp1|--dp 1 --to fully_reshardable|--tp 1 --pp 1"
  "tp2pp2-model-tp1pp2|model|tp2pp2-dp1|--dp 1 --to fully_reshardable|--tp 1 --pp 2"
  "tp2dp2-model-tp1dp2|model|tp2-dp2|--dp 2 --to fully_reshardable|--tp 1 --dp 2"
  "pp2x3-model-pp1|model|pp2-dp1-3layers|--dp 1 --to fully_reshardable|--pp 1"
  "buckets-model-tp1|model|tp2-dp1-buckets|--dp 1 --to fully_reshardable|--tp 1"
  # buckets: --dp N at the same TP x PP (DP 1 -> 2, 2 -> 1), the bucket size as the loading run has it.
  "tp2-buckets-dp2|buckets|tp2-dp1|--dp 2|--dp 2"
  "buckets-buckets-dp2|buckets|tp2-dp1-buckets|--dp 2 --bucket-size 1000|--dp 2"
  "tp2dp2-buckets-dp1|buckets|tp2-dp2|--dp 1|--dp 1"
  # A bucket-size change at TP 2: one bucket per buffer -> overlap_grad_reduce with 1000-element buckets.
  "tp2-buckets-size1000|buckets|tp2-dp1|--dp 1 --bucket-size 1000|--bucket-size 1000"
  # parallel: --tp/--pp into dp_reshardable. TP 2 -> 1, back 1 -> 2 (from that output), TP 1 -> 2 from
  # Megatron's own TP 1 save (PP 2), PP 2 -> 1 (also tied embeddings), TP 2 x PP 2 -> TP 1 x PP 2 x DP 2
  # (the fixtures have 2 layers: PP 4 cannot hold them) and -> TP 1 x PP 1, PP 2 (2 + 1 layers) -> PP 3
  # (the largest PP a fixture's layers allow) and its stages 2 + 1 -> 1 + 2 (uneven, as
  # num_layers_in_first_pipeline_stage), TP 2 x DP 2 -> TP 1 x DP 1, TP 2 x DP 1 -> TP 1 x DP 2, and TP 2
  # with 1000-element buckets -> TP 1 keeping them.
  "tp2-tp1|parallel|tp2-dp1|--tp 1 --dp 1 --bucket-size none|--tp 1"
  "tp1-tp2|parallel|@tp2-tp1|--tp 2 --dp 1 --bucket-size none|--tp 2"
  "pp2tp1-tp2|parallel|pp2-dp1|--tp 2 --dp 1|--tp 2"
  "pp2-pp1|parallel|pp2-dp1|--pp 1 --dp 1 --bucket-size none|--pp 1"
  "pp2tied-pp1|parallel|pp2-dp1-tied|--pp 1 --dp 1 --bucket-size none|--pp 1"
  "tp2pp2-tp1pp2dp2|parallel|tp2pp2-dp1|--tp 1 --pp 2 --dp 2 --bucket-size none|--tp 1 --pp 2 --dp 2"
  "tp2pp2-tp1pp1|parallel|tp2pp2-dp1|--tp 1 --pp 1 --dp 1 --bucket-size none|--tp 1 --pp 1"
  "pp2x3-pp3|parallel|pp2-dp1-3layers|--pp 3 --dp 1|--pp 3"
  "pp2x3-first1|parallel|pp2-dp1-3layers|--pp 2 --first-stage-layers 1 --dp 1|--pp 2 --first-stage-layers 1"
  "tp2dp2-tp1dp1|parallel|tp2-dp2|--tp 1 --dp 1 --bucket-size none|--tp 1 --dp 1"
  "tp2dp1-tp1dp2|parallel|tp2-dp1|--tp 1 --dp 2 --bucket-size none|--tp 1 --dp 2"
  "buckets-tp1|parallel|tp2-dp1-buckets|--tp 1 --dp 1 --bucket-size 1000|--tp 1"
  # ep: EP 2 -> EP 1 (the experts join the dense buffers), at DP 2 and DP 1; a MoE whose first layer
  # is dense; back to EP 2 from the EP 1 output; a MoE at EP 2 rewritten at TP 2 (expert TP 2;
  # stepped on seeded gradients: MoE at TP > 1 needs sequence parallelism, which Megatron's torch
  # norms refuse without Transformer Engine or Apex) and at PP 2. (Not DP 4, expert DP 2:
  # the fixtures' fp32 buffer then leaves a rank only padding, which Megatron-Core refuses itself,
  # "empty bucket encountered".) Megatron's own save is loaded at EP 1 with its chained common state
  # reduced to the dense child's (load_at_parallelism.py --reduce-chained-common), which Megatron-Core
  # 0.19.2 does not do itself.
  "ep2-ep1dp2|ep|ep2-moe|--ep 1 --dp 2 --bucket-size none|--ep 1 --dp 2"
  "ep2-ep1dp1|ep|ep2-moe|--ep 1 --dp 1 --bucket-size none|--ep 1 --dp 1"
  "ep2densefirst-ep1|ep|ep2-moe-dense-first|--ep 1 --dp 2 --bucket-size none|--ep 1 --dp 2"
  "ep1-ep2|ep|@ep2-ep1dp2|--ep 2 --dp 2 --bucket-size none|--ep 2 --dp 2"
  "ep2-tp2|ep|ep2-moe|--tp 2 --ep 2 --dp 2|--tp 2 --ep 2 --dp 2"
  "ep2-pp2|ep|ep2-moe|--pp 2 --ep 2 --dp 2|--pp 2 --ep 2 --dp 2"
)

declare -A SRC_OF  # tag -> the fixture configuration its state comes from
status=0 ran=() port=29700
for case in "${CASES[@]}"; do
  IFS='|' read -r tag kind src opts sizes <<<"$case"
  [[ " $ONLY " == *" $kind "* ]] || continue
  [ -z "${TAGS:-}" ] || [[ " $TAGS " == *" $tag "* ]] || continue
  if [[ $src == @* ]]; then
    in="$OUT/${src#@}"
    SRC_OF[$tag]=${SRC_OF[${src#@}]:-}
    [ -n "${SRC_OF[$tag]}" ] || { echo "$tag: needs case ${src#@}, not run"; status=1; continue; }
  else
    in="$M/$src-dp_reshardable/ckpt"
    SRC_OF[$tag]=$src
  fi
  rm -rf "$OUT/$tag"
  if ! "$FPGATHER" --no-progress reshard "$in" "$OUT/$tag" $opts >"$OUT/$tag.reshard.txt" 2>&1; then
    echo "$tag: reshard $opts failed: $(tail -3 "$OUT/$tag.reshard.txt")"
    status=1
    unset "SRC_OF[$tag]"
    continue
  fi
  ran+=("$tag|$kind|$sizes")
done
echo "resharded ${#ran[@]} cases in $(($(date +%s) - t0)) s"

# compare TAG SIZES: fpgather's output and Megatron's fully_reshardable save loaded alike, at once.
compare() {
  local tag=$1 sizes=$2 p=$3 c=${SRC_OF[$1]}
  local truth="$M/$c-dp_reshardable/truth.safetensors" reduce=()
  [[ " $sizes " == *" --ep 1 "* ]] && reduce=(--reduce-chained-common)
  "$PY" testdata/megatron/load_at_parallelism.py "$OUT/$tag" "$c" "$truth" "$OUT/$tag-fpgather.json" $sizes \
    --port "$p" >"$OUT/$tag-fpgather.txt" 2>&1 &
  local a=$!
  "$PY" testdata/megatron/load_at_parallelism.py "$M/$c-fully_reshardable/ckpt" "$c" "$truth" \
    "$OUT/$tag-megatron.json" $sizes "${reduce[@]}" --port $((p + 50)) >"$OUT/$tag-megatron.txt" 2>&1 &
  local b=$!
  wait $a; local ra=$?
  wait $b; local rb=$?
  local line rc
  line=$("$PY" testdata/megatron/compare_loads.py "$OUT/$tag-fpgather.json" "$OUT/$tag-megatron.json" "$ra" "$rb")
  rc=$?
  {
    echo "$tag ($sizes): $line"
    [ "$ra" = 0 ] || { echo "  fpgather's output:"; tail -15 "$OUT/$tag-fpgather.txt" | sed 's/^/    /'; }
    [ "$rb" = 0 ] || { echo "  Megatron's save:"; tail -15 "$OUT/$tag-megatron.txt" | sed 's/^/    /'; }
  } >"$OUT/$tag.line"
  return $rc
}

pids=() tags=()
for item in "${ran[@]}"; do
  IFS='|' read -r tag kind sizes <<<"$item"
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  compare "$tag" "$sizes" $port &
  pids+=($!) tags+=("$tag")
  port=$((port + 100))
done
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { status=1; failed=$((failed + 1)); }
  cat "$OUT/${tags[$i]}.line" 2>/dev/null || echo "${tags[$i]}: no result"
done
echo "$((${#pids[@]} - failed))/${#pids[@]} cases the same as Megatron's own save; $(($(date +%s) - t0)) s"
exit $status
