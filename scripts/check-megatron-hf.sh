#!/usr/bin/env bash
# Megatron <-> Hugging Face with the real clients, on the GPU machine.
#
# export: transformers loads fpgather's Hugging Face export of real Megatron-Core checkpoints, with
#   Megatron's logits: each fixture of testdata/megatron/parallel below is exported with `convert --to hf`
#   (a config.json template made from its truth.json, except hf-llama, whose saved training args stand
#   in), checked byte for byte against testdata/megatron/hf/hf_reference.py, then loaded by transformers
#   and run on fixed tokens beside Megatron-Core's own forward of the checkpoint
#   (testdata/megatron/hf/check_hf_logits.py); two FP8 exports too: blockwise (DeepSeek-V3's fp8) and
#   MXFP8 (compressed-tensors; its down_proj, 48 wide, is no multiple of 32 and stays BF16).
# import: Megatron-Core loads fpgather's import of those exports back (`convert --to megatron`, at the
#   fixture's TP x PP x EP, with --dtype fp32 and with --dtype bf16) with the original checkpoint's
#   logits bit for bit (testdata/megatron/hf/check_import_logits.py), and at a TP 2, a PP 2 and an EP 2
#   target over gloo on the one GPU.
#
# Usage: scripts/check-megatron-hf.sh FPGATHER OUT_DIR [export] [import]   (default: both; needs a GPU,
# torch, transformers, and .whl/ as scripts/gen-megatron-fixtures.sh describes, compressed-tensors'
# wheels in .whl/extra). Prints one line per case; REPORTS: OUT_DIR/logits.json, OUT_DIR/import*.json.
# Exit 1 if a tensor differs, a load fails its bounds or an import's logits differ.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FPGATHER=${1:?usage: check-megatron-hf.sh FPGATHER OUT_DIR [export] [import]}
OUT=${2:?usage: check-megatron-hf.sh FPGATHER OUT_DIR [export] [import]}
shift 2
PARTS=${*:-export import}
mkdir -p "$OUT"
source scripts/megatron-site.sh
M=testdata/megatron/parallel
R=testdata/megatron/hf/hf_reference.py
H=testdata/megatron/hf
status=0
t0=$(date +%s)

if [[ " $PARTS " == *" export "* ]]; then
  pairs=()
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
  for fp8 in blockwise mxfp8; do
    d=$OUT/hf-llama-fp8-$fp8
    rm -rf "$d"
    x=()
    [ $fp8 = mxfp8 ] && x=(--exclude '^model\.embed_tokens\.|^lm_head\.|down_proj')
    "$FPGATHER" --no-progress convert "$M/hf-llama-dp_reshardable/ckpt" "$d" --to hf --fp8 $fp8 "${x[@]}" >"$d.log" 2>&1 &&
      pairs+=("$M/hf-llama-dp_reshardable=$d") || { echo "fp8 $fp8 export failed: $(tail -1 "$d.log")"; status=1; }
  done
  python3 $H/check_hf_logits.py "$OUT/logits.json" "${pairs[@]}" 2>&1 |
    grep -v -i "warn\|Loading weights" | grep -E "^[a-z0-9_-]+ \(" || true
  python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$OUT/logits.json" || status=1
  echo "export part: $(( $(date +%s) - t0 )) s"
fi

# export_import FIXTURE ARCH DTYPE NAME [import options]: the fixture exported (a template config) and
# its export imported back; prints FIXTURE=IMPORTED:DTYPE.
export_import() {
  local name=$1 arch=$2 dtype=$3 tag=$4; shift 4
  local fx=$M/$name-dp_reshardable hf=$OUT/imp/$name-$dtype-hf mg=$OUT/imp/$name-$dtype-$tag
  mkdir -p "$OUT/imp"
  [ -f "$hf.json" ] || python3 "$R" template "$fx" "$arch" "$hf.json"
  if ! { [ -d "$hf" ] || "$FPGATHER" --no-progress convert "$fx/ckpt" "$hf" --to hf --arch "$arch" --hf-config "$hf.json" \
           --dtype "$dtype" >"$hf.log" 2>&1; } ||
     ! "$FPGATHER" --no-progress convert "$hf" "$mg" --to megatron --layer-spec local --dtype "$dtype" --force "$@" \
         >"$mg.log" 2>&1; then
    echo "$name ($dtype, $tag): export or import failed: $(tail -1 "$hf.log" "$mg.log" 2>/dev/null | tr '\n' ' ')" >&2
    return 1
  fi
  echo "$fx=$mg:$dtype"
}

if [[ " $PARTS " == *" import "* ]]; then
  t1=$(date +%s)
  rm -rf "$OUT/imp"
  cases=()
  # fixture, arch, TP, PP, EP and the vocabulary divisor that pads it as the fixture is padded
  IMPORTS=(hf-llama:llama:1:1:1:128 hf-llama-tied:llama:1:1:1:128 hf-qwen3:qwen3:1:1:1:128 hf-mixtral:mixtral:1:1:2:128
           hf-qwen3-moe:qwen3_moe:1:1:2:128 tp2-dp1:llama:2:1:1:32 pp2-dp1:llama:1:2:1:64 tp2pp2-dp1:llama:2:2:1:32
           pp2-dp1-tied:llama:1:2:1:64 ep2-moe:mixtral:1:1:2:64)
  for c in "${IMPORTS[@]}"; do
    IFS=: read -r name arch tp pp ep div <<<"$c"
    for dtype in fp32 bf16; do
      case_=$(export_import "$name" "$arch" "$dtype" asfixture --tp "$tp" --pp "$pp" --ep "$ep" \
                --make-vocab-size-divisible-by "$div") && cases+=("$case_") || status=1
    done
  done
  python3 $H/check_import_logits.py "$OUT/import.json" "${cases[@]}" 2>&1 | grep -E "^[a-z0-9_-]+ \(" || true
  python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$OUT/import.json" || status=1
  # Other parallel sizes than the fixture's, loaded and run at those sizes (gloo, one GPU).
  for w in "tp2:2:1:1:hf-llama:llama:64" "pp2:1:2:1:hf-llama:llama:128" "ep2:1:1:2:hf-mixtral:mixtral:128"; do
    IFS=: read -r tag tp pp ep name arch div <<<"$w"
    case_=$(export_import "$name" "$arch" fp32 "$tag" --tp "$tp" --pp "$pp" --ep "$ep" --make-vocab-size-divisible-by "$div") ||
      { status=1; continue; }
    python3 $H/check_import_logits.py "$OUT/import-$tag.json" --world "$tp" "$pp" "$ep" "$case_" || status=1
  done
  echo "import part: $(( $(date +%s) - t1 )) s"
fi
exit $status
