#!/usr/bin/env bash
# Transformers loads fpgather's Hugging Face export of real Megatron-Core checkpoints, with Megatron's
# logits: each fixture of testdata/megatron/parallel below is exported with `convert --to hf` (a
# config.json template made from its truth.json, except hf-llama, whose saved training args stand in),
# checked byte for byte against testdata/megatron/hf/hf_reference.py, then loaded by transformers and
# run on fixed tokens beside Megatron-Core's own forward of the checkpoint
# (testdata/megatron/hf/check_hf_logits.py); one FP8 (blockwise) export too.
#
# Usage: scripts/check-megatron-hf.sh FPGATHER OUT_DIR   (needs a GPU, torch, transformers, and .whl/ as
# scripts/gen-megatron-fixtures.sh describes). Prints one line per case; REPORT: OUT_DIR/logits.json.
# Exit 1 if a tensor differs or a load fails its bounds (check_hf_logits.py).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FPGATHER=${1:?usage: check-megatron-hf.sh FPGATHER OUT_DIR}
OUT=${2:?usage: check-megatron-hf.sh FPGATHER OUT_DIR}
mkdir -p "$OUT"
source scripts/megatron-site.sh
M=testdata/megatron/parallel
R=testdata/megatron/hf/hf_reference.py
status=0 pairs=()
# fixture (without -dp_reshardable), arch, and "args" where the saved args replace the template
CASES=(hf-llama:llama:args hf-llama-tied:llama hf-llama-tied:mistral hf-qwen3:qwen3 hf-mixtral:mixtral
       hf-qwen3-moe:qwen3_moe tp2-dp1:llama pp2-dp1:llama tp2pp2-dp1:llama pp2-dp1-tied:llama ep2-moe:mixtral)
for c in "${CASES[@]}"; do
  IFS=: read -r name arch how <<<"$c"
  fx=$M/$name-dp_reshardable hf=$OUT/$name-$arch
  rm -rf "$hf"
  cfg=()
  if [ "$how" != args ]; then python3 "$R" template "$fx" "$arch" "$hf.json"; cfg=(--hf-config "$hf.json"); fi
  if ! "$FPGATHER" --no-progress convert "$fx/ckpt" "$hf" --to hf --arch "$arch" "${cfg[@]}" >"$hf.log" 2>&1; then
    echo "$name as $arch: convert failed: $(tail -1 "$hf.log")"; status=1; continue
  fi
  python3 "$R" check "$fx" "$arch" "$hf" || status=1
  pairs+=("$fx=$hf")
done
fp8=$OUT/hf-llama-fp8-blockwise
rm -rf "$fp8"
"$FPGATHER" --no-progress convert "$M/hf-llama-dp_reshardable/ckpt" "$fp8" --to hf --fp8 blockwise >/dev/null &&
  pairs+=("$M/hf-llama-dp_reshardable=$fp8") || status=1
python3 testdata/megatron/hf/check_hf_logits.py "$OUT/logits.json" "${pairs[@]}" 2>&1 |
  grep -v -i "warn\|Loading weights" | grep -E "^[a-z0-9-]+ \(" || true
python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$OUT/logits.json" || status=1
exit $status
