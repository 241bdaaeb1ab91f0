#!/usr/bin/env bash
# Megatron-Core resumes from fpgather's reshard at another parallelism: each model-parallel fixture's
# dp_reshardable checkpoint is rewritten `--to fully_reshardable` by fpgather, then loaded by
# Megatron-Core 0.19.2 (testdata/megatron/load_at_parallelism.py: 1-2 processes on one GPU over gloo)
# at a TP/PP/EP/DP other than the one it was saved at, its loaded state compared bitwise with the
# source's ground truth, and a few steps trained. The same load of Megatron's own fully_reshardable
# save of that state must give the same losses and the same state after the steps.
#
# Usage: scripts/check-megatron-reshard.sh FPGATHER OUT_DIR   (needs a GPU, torch, and .whl/ as
# scripts/gen-megatron-fixtures.sh describes). Prints one line per case; exit 1 if any differs.
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
fpgather_out() { echo "$OUT/$1-fpgather"; }
for c in $(printf '%s\n' "${CASES[@]}" | cut -d' ' -f1 | sort -u); do
  dp=$(printf '%s\n' "${CASES[@]}" | grep -m1 "^$c " | cut -d' ' -f2)
  "$FPGATHER" --no-progress reshard "$M/$c-dp_reshardable/ckpt" "$(fpgather_out "$c")" --dp "$dp" \
    --to fully_reshardable >/dev/null || { echo "$c: reshard failed"; exit 1; }
done
status=0 port=29700 n=0
for case in "${CASES[@]}"; do
  read -r c dp sizes <<<"$case"
  tag="$c-to$(echo "$sizes" | tr -d ' -')"
  # Both loads of a case at once: 1-2 processes each on the GPU.
  python3 testdata/megatron/load_at_parallelism.py "$(fpgather_out "$c")" "$c" "$M/$c-dp_reshardable/truth.safetensors" \
    "$OUT/$tag-fpgather.json" $sizes --port $port >"$OUT/$tag-fpgather.txt" 2>&1 &
  a=$!
  python3 testdata/megatron/load_at_parallelism.py "$M/$c-fully_reshardable/ckpt" "$c" "$M/$c-dp_reshardable/truth.safetensors" \
    "$OUT/$tag-megatron.json" $sizes --port $((port + 50)) >"$OUT/$tag-megatron.txt" 2>&1 &
  b=$!
  wait $a; ra=$?
  wait $b; rb=$?
  port=$((port + 100))
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
  echo "$c saved at its own sizes, loaded with $sizes: $line"
  [ "$ra" = 0 ] || tail -20 "$OUT/$tag-fpgather.txt"
done
exit $status
