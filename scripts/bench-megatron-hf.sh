#!/usr/bin/env bash
# `convert --to hf` of a Megatron torch_dist checkpoint and `convert --to megatron` of the Hugging Face
# model back (BENCHMARKS.md, "Megatron to Hugging Face"), at two model sizes, measured in one run. Per size: a synthetic TP 2 x PP 2 x DP 2 dp_reshardable
# checkpoint (`fpgather bench megatron-make`, hidden 2048, FFN 5632, 16 heads, 4 query groups, vocab
# 32768; LAYERS_A and LAYERS_B layers), then $ROUNDS rounds, each with the page cache dropped before
# every step:
#   copy    a file as large as the export's output, on the checkpoint's disk, copied with cat to
#           $EXPORT_OUT (tmpfs by default): the duplex rate of those bytes;
#   plain   `convert CKPT OUT.safetensors` (the per-parameter export of the same weights, Megatron
#           names) to $EXPORT_OUT;
#   hf      `convert CKPT OUT_DIR --to hf --hf-config …` to $EXPORT_OUT;
#   import  `convert HF_DIR OUT --to megatron --tp 2 --pp 2` of that model (kept on the checkpoint's
#           disk) to $EXPORT_OUT: the same bytes the other way.
# Rates are model bytes over wall time; medians, hf's ratio to copy and to plain, import's to copy, and
# the peak RSS of hf and of import (/usr/bin/time).
#
# Usage: scripts/bench-megatron-hf.sh [WORK_DIR]   (default /tmp/fpgather-bench-megatron-hf, removed at
# the end). Environment: FPGATHER (default build/fpgather), LAYERS_A (8), LAYERS_B (24), ROUNDS (3),
# EXPORT_OUT (/dev/shm). Dropping the page cache needs root; otherwise each file is evicted with
# `dd iflag=nocache`.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
FPGATHER=${FPGATHER:-$SRC/build/fpgather}
ROUNDS=${ROUNDS:-3}
EXPORT_OUT=${EXPORT_OUT:-/dev/shm}
WORK=${1:-/tmp/fpgather-bench-megatron-hf}
[ -x "$FPGATHER" ] || { echo "no fpgather binary at $FPGATHER (set FPGATHER)" >&2; exit 2; }
[ -e "$WORK" ] && { echo "$WORK exists; give another WORK_DIR" >&2; exit 2; }
mkdir -p "$WORK"
trap 'rm -rf "$WORK" "$EXPORT_OUT"/fpgather-bench-hf*' EXIT

drop_cache() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then
    echo 3 >/proc/sys/vm/drop_caches
  else
    find "$@" -type f -exec dd if={} iflag=nocache count=0 status=none \;
  fi
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN {print b - a}'; }

echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$FPGATHER" --version | head -1
cat >"$WORK/config.json" <<'EOF'
{"model_type": "llama", "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
 "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "max_position_embeddings": 4096}
EOF
for layers in "${LAYERS_A:-8}" "${LAYERS_B:-24}"; do
  ck="$WORK/ckpt-$layers"
  "$FPGATHER" --no-progress bench megatron-make "$ck" --tp 2 --pp 2 --dp 2 --layers "$layers" --hidden 2048 \
    --ffn 5632 --heads 16 --query-groups 4 --vocab 32768 --bucket-size 40000000 >/dev/null
  hf="$EXPORT_OUT/fpgather-bench-hf-$layers" plain="$EXPORT_OUT/fpgather-bench-hf-plain.safetensors"
  model="$WORK/hf-$layers" imp="$EXPORT_OUT/fpgather-bench-hf-import"
  "$FPGATHER" --no-progress convert "$ck" "$model" --to hf --hf-config "$WORK/config.json" >/dev/null
  out_bytes=$(du -sb "$model" | cut -f1)
  head -c "$out_bytes" /dev/zero >"$WORK/same-size"
  : >"$WORK/copy" ; : >"$WORK/plain" ; : >"$WORK/hf" ; : >"$WORK/import"
  for ((i = 0; i < ROUNDS; i++)); do
    drop_cache "$WORK"
    t0=$(date +%s.%N); cat "$WORK/same-size" >"$EXPORT_OUT/fpgather-bench-hf-copy"; t1=$(date +%s.%N)
    rm -f "$EXPORT_OUT/fpgather-bench-hf-copy"
    echo "$out_bytes $(seconds "$t0" "$t1")" | awk '{print $1 / $2 / 1e9}' >>"$WORK/copy"
    drop_cache "$ck"
    t0=$(date +%s.%N); "$FPGATHER" --no-progress convert "$ck" "$plain" >/dev/null; t1=$(date +%s.%N)
    rm -f "$plain"
    echo "$out_bytes $(seconds "$t0" "$t1")" | awk '{print $1 / $2 / 1e9}' >>"$WORK/plain"
    drop_cache "$ck"
    /usr/bin/time -f "%e %M" -o "$WORK/hf.time" "$FPGATHER" --no-progress convert "$ck" "$hf" --to hf \
      --hf-config "$WORK/config.json" >/dev/null
    rm -rf "$hf"
    read -r wall rss <"$WORK/hf.time"
    echo "$out_bytes $wall" | awk '{print $1 / $2 / 1e9}' >>"$WORK/hf"
    drop_cache "$model"
    /usr/bin/time -f "%e %M" -o "$WORK/import.time" "$FPGATHER" --no-progress convert "$model" "$imp" --to megatron \
      --tp 2 --pp 2 >/dev/null
    rm -rf "$imp"
    read -r iwall irss <"$WORK/import.time"
    echo "$out_bytes $iwall" | awk '{print $1 / $2 / 1e9}' >>"$WORK/import"
  done
  c=$(median <"$WORK/copy") p=$(median <"$WORK/plain") h=$(median <"$WORK/hf") m=$(median <"$WORK/import")
  printf '%d layers: checkpoint %.2f GB, model %.2f GB; median of %d, GB/s of output: copy %.3f, plain export %.3f, hf export %.3f (%.2f of the copy, %.2f of plain); hf peak RSS %d MiB\n' \
    "$layers" "$(du -sb "$ck" | awk '{print $1 / 1e9}')" "$(echo "$out_bytes" | awk '{print $1 / 1e9}')" "$ROUNDS" \
    "$c" "$p" "$h" "$(echo "$h $c" | awk '{print $1 / $2}')" "$(echo "$h $p" | awk '{print $1 / $2}')" "$((rss / 1024))"
  printf '  import (the HF model back, --tp 2 --pp 2): %.3f GB/s (%.2f of the copy); import peak RSS %d MiB\n' \
    "$m" "$(echo "$m $c" | awk '{print $1 / $2}')" "$((irss / 1024))"
  echo "  rounds: copy $(tr '\n' ' ' <"$WORK/copy"); plain $(tr '\n' ' ' <"$WORK/plain"); hf $(tr '\n' ' ' <"$WORK/hf"); import $(tr '\n' ' ' <"$WORK/import")"
  rm -rf "$ck" "$model" "$WORK/same-size"
done
