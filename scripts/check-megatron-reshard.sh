#!/usr/bin/env bash
# Megatron-Core resumes from fpgather's reshard at another parallelism:
#  - model space: each model-parallel fixture's dp_reshardable checkpoint is rewritten
#    `--to fully_reshardable` and loaded at a TP/PP/DP other than the one it was saved at;
#  - buckets: a fixture's dp_reshardable checkpoint is rewritten `--dp N` (every optimizer group's
#    buckets laid out again for N ranks, same TP × PP) and loaded as dp_reshardable at that DP, which
#    Megatron accepts only in the exact bucket layout it computes itself.
# Each load (testdata/megatron/load_at_parallelism.py, Megatron-Core 0.19.2, 1-4 processes on one GPU
# over gloo) compares the loaded state bitwise with the source's ground truth and trains a few steps;
# the same load of Megatron's own fully_reshardable save of that state, beside it, must give the same
# losses and the same state after the steps.
#
# Usage: scripts/check-megatron-reshard.sh FPGATHER OUT_DIR   (needs a GPU, torch, and .whl/ as
# scripts/gen-megatron-fixtures.sh describes). ONLY=model|buckets runs one kind. Prints one line per
# case; exit 1 if any differs.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FPGATHER=${1:?usage: check-megatron-reshard.sh FPGATHER OUT_DIR}
OUT=${2:?usage: check-megatron-reshard.sh FPGATHER OUT_DIR}
mkdir -p "$OUT"
source scripts/megatron-site.sh
M=testdata/megatron/parallel
# source configuration, its DP, the target sizes. Not here: the MoE fixtures, whose fully_reshardable
# save Megatron-Core 0.19.2 itself does not load at EP 1 on one rank (the ChainedOptimizer's load gives
# its whole state to the first child: KeyError 'optimizer'), Megatron's own save as much as fpgather's.
CASES=(
  "tp2pp2-dp1 1 --tp 1 --pp 1"
  "tp2pp2-dp1 1 --tp 1 --pp 2"
  "tp2-dp2 2 --tp 1 --dp 2"
  "pp2-dp1-3layers 1 --pp 1"
  "tp2-dp1-buckets 1 --tp 1"
)
# source configuration, the target DP, fpgather's bucket options (as the resumed run is configured)
BUCKET_CASES=(
  "tp2-dp1 2"
  "tp2-dp1-buckets 2 --bucket-size 1000"
  "tp2-dp2 1"
)
[ "${ONLY:-}" = buckets ] && CASES=()
[ "${ONLY:-}" = model ] && BUCKET_CASES=()
fpgather_out() { echo "$OUT/$1-fpgather"; }
for c in $( ((${#CASES[@]})) && printf '%s\n' "${CASES[@]}" | cut -d' ' -f1 | sort -u); do
  dp=$(printf '%s\n' "${CASES[@]}" | grep -m1 "^$c " | cut -d' ' -f2)
  "$FPGATHER" --no-progress reshard "$M/$c-dp_reshardable/ckpt" "$(fpgather_out "$c")" --dp "$dp" \
    --to fully_reshardable >/dev/null || { echo "$c: reshard failed"; exit 1; }
done
status=0 port=29700
# compare TAG CKPT CONFIG SIZES...: both loads at once, then one line.
compare() {
  local tag=$1 ours=$2 c=$3
  shift 3
  python3 testdata/megatron/load_at_parallelism.py "$ours" "$c" "$M/$c-dp_reshardable/truth.safetensors" \
    "$OUT/$tag-fpgather.json" "$@" --port $port >"$OUT/$tag-fpgather.txt" 2>&1 &
  local a=$!
  python3 testdata/megatron/load_at_parallelism.py "$M/$c-fully_reshardable/ckpt" "$c" "$M/$c-dp_reshardable/truth.safetensors" \
    "$OUT/$tag-megatron.json" "$@" --port $((port + 50)) >"$OUT/$tag-megatron.txt" 2>&1 &
  local b=$!
  wait $a; local ra=$?
  wait $b; local rb=$?
  port=$((port + 100))
  local line
  line=$(python3 - "$OUT/$tag-fpgather.json" "$OUT/$tag-megatron.json" "$ra" "$rb" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
except Exception as e:
    print(f"no result ({e}); exits {sys.argv[3]} {sys.argv[4]}"); sys.exit(1)
same = a["losses"] == b["losses"] and a["state_sha256"] == b["state_sha256"]
print(f"fpgather's output: state equal {a['all_equal']} ({a['equal']}/{a['truth_tensors']}); "
      f"Megatron's own save: {b['all_equal']}; losses {a['losses']} vs {b['losses']}; "
      f"state after the steps {'the same' if same else 'DIFFERENT'} ({a['state_sha256'][:12]})")
sys.exit(0 if a["all_equal"] and b["all_equal"] and same else 1)
PY
  ) || status=1
  echo "$tag: $line"
  [ "$ra" = 0 ] || tail -20 "$OUT/$tag-fpgather.txt"
}
for case in "${CASES[@]}"; do
  read -r c dp sizes <<<"$case"
  compare "$c-model-to$(echo "$sizes" | tr -d ' -')" "$(fpgather_out "$c")" "$c" $sizes
done
for case in "${BUCKET_CASES[@]}"; do
  read -r c dp opts <<<"$case"
  out="$OUT/$c-dp$dp"
  "$FPGATHER" --no-progress reshard "$M/$c-dp_reshardable/ckpt" "$out" --dp "$dp" $opts >/dev/null \
    || { echo "$c: reshard --dp $dp failed"; status=1; continue; }
  compare "$c-buckets-dp$dp" "$out" "$c" --dp "$dp"
done
exit $status
