#!/usr/bin/env bash
# `convert --to hf` of a Megatron torch_dist checkpoint and `convert --to megatron` of the Hugging Face
# model back (BENCHMARKS.md, "Megatron to Hugging Face"), at two model sizes, measured in one run. Per size: a synthetic TP 2 x PP 2 x DP 2 dp_reshardable
# checkpoint (`fpgather bench megatron-make`, hidden 2048, FFN 5632, 16 heads, 4 query groups, vocab
# 32768; LAYERS_A and LAYERS_B layers), then $ROUNDS rounds, each with the page cache dropped before
# every step:
#   copy    a file as large as the export's output, on the checkpoint's disk, copied with cat to
#           $EXPORT_OUT (tmpfs by default): the duplex rate of those bytes;
#   ranges  the stored items the export reads (every model key's chunks, `inspect --key`: the weights
#           among the optimizer state of the 8 rank files), each copied with dd from its file to
#           $EXPORT_OUT, the files at once: the duplex time of the bytes the export must read;
#   start   `fpgather --version`: the process start alone (its libraries read from the disk);
#   plain   `convert CKPT OUT.safetensors` (the per-parameter export of the same weights, Megatron
#           names) to $EXPORT_OUT;
#   hf      `convert CKPT OUT_DIR --to hf --hf-config …` to $EXPORT_OUT;
#   hf-warm the same with only the checkpoint cold: the binary and its libraries read in first (a
#           `--version` after the drop), as they are for every command but a machine's first;
#   import  `convert HF_DIR OUT --to megatron --tp 2 --pp 2` of that model (kept on the checkpoint's
#           disk) to $EXPORT_OUT: the same bytes the other way.
# Rates are model bytes over wall time; medians, hf's ratio to copy and to plain, import's to copy, the
# CPU seconds (user + system) and peak RSS of hf and of import (/usr/bin/time).
# With BEFORE (another fpgather build), plain, hf and import are timed of it too, in turn with
# FPGATHER's in each round (before, now), each with its own medians; the outputs of both are compared
# (sha256) in the first round.
#
# Usage: scripts/bench-megatron-hf.sh [WORK_DIR]   (default /tmp/fpgather-bench-megatron-hf, removed at
# the end). Environment: FPGATHER (default build/fpgather), LAYERS_A (8), LAYERS_B (24), ROUNDS (3),
# EXPORT_OUT (/dev/shm), BEFORE. Dropping the page cache needs root; otherwise each file is evicted with
# `dd iflag=nocache`.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
FPGATHER=${FPGATHER:-$SRC/build/fpgather}
ROUNDS=${ROUNDS:-3}
EXPORT_OUT=${EXPORT_OUT:-/dev/shm}
WORK=${1:-/tmp/fpgather-bench-megatron-hf}
[ -x "$FPGATHER" ] || { echo "no fpgather binary at $FPGATHER (set FPGATHER)" >&2; exit 2; }
[ -z "${BEFORE:-}" ] || [ -x "$BEFORE" ] || { echo "no fpgather binary at $BEFORE (BEFORE)" >&2; exit 2; }
# The builds timed: FPGATHER ("now") and, with BEFORE, that one ("before") ahead of it every time.
builds=(now)
[ -n "${BEFORE:-}" ] && builds=(before now)
bin_of() { [ "$1" = before ] && echo "$BEFORE" || echo "$FPGATHER"; }
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
# item_ranges CKPT: "FILE OFFSET LENGTH" of every stored chunk of the model's keys (not optimizer.*),
# by file and offset.
item_ranges() {
  "$FPGATHER" --json inspect "$1" --keys | python3 -c '
import json, sys
for k in json.load(sys.stdin)["keys"]:
    if k.get("tensor") and not k["key"].startswith("optimizer"): print(k["key"])' |
    while read -r key; do
      "$FPGATHER" --json inspect "$1" --key "$key" |
        python3 -c 'import json, sys; [print(c["file"], c["offset"], c["length"]) for c in json.load(sys.stdin)["chunks"]]'
    done | sort -k1,1 -k2,2n
}
# copy_ranges CKPT RANGES OUT: each file's ranges copied in order by dd to OUT-FILE, the files at once.
copy_ranges() {
  local f
  for f in $(cut -d' ' -f1 "$2" | uniq); do
    awk -v f="$f" '$1 == f {print $2, $3}' "$2" | while read -r off len; do
      dd if="$1/$f" iflag=skip_bytes,count_bytes skip="$off" count="$len" bs=4M status=none
    done >"$3-$f" &
  done
  wait
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN {print b - a}'; }
# timed NAME BUILD CMD...: appends to $WORK/r-NAME-BUILD the rate of $out_bytes, "GB/s cpu-seconds peak-RSS-KiB".
timed() {
  local name=$1 build=$2
  shift 2
  /usr/bin/time -f "%e %U %S %M" -o "$WORK/t" "$@" >/dev/null
  read -r wall user sys rss <"$WORK/t"
  echo "$out_bytes $wall $user $sys $rss" | awk '{print $1 / $2 / 1e9, $3 + $4, $5}' >>"$WORK/r-$name-$build"
}
col() { awk -v c="$1" '{print $c}' "$2" | median; }
out_sum() { find "$1" -type f \( -name '*.safetensors' -o -name '*.distcp' \) | sort | xargs cat | sha256sum | cut -c1-16; }

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
  item_ranges "$ck" >"$WORK/ranges"
  range_bytes=$(awk '{s += $3} END {print s}' "$WORK/ranges")
  rm -f "$WORK"/copy "$WORK"/ranges-s "$WORK"/start-s "$WORK"/r-*
  : >"$WORK/copy"
  : >"$WORK/ranges-s"
  : >"$WORK/start-s"
  for ((i = 0; i < ROUNDS; i++)); do
    drop_cache "$WORK"
    t0=$(date +%s.%N); cat "$WORK/same-size" >"$EXPORT_OUT/fpgather-bench-hf-copy"; t1=$(date +%s.%N)
    rm -f "$EXPORT_OUT/fpgather-bench-hf-copy"
    echo "$out_bytes $(seconds "$t0" "$t1")" | awk '{print $1 / $2 / 1e9}' >>"$WORK/copy"
    drop_cache "$ck"
    t0=$(date +%s.%N); copy_ranges "$ck" "$WORK/ranges" "$EXPORT_OUT/fpgather-bench-hf-ranges"; t1=$(date +%s.%N)
    rm -f "$EXPORT_OUT"/fpgather-bench-hf-ranges*
    seconds "$t0" "$t1" >>"$WORK/ranges-s"
    drop_cache "$ck"
    t0=$(date +%s.%N); "$FPGATHER" --version >/dev/null; t1=$(date +%s.%N)
    seconds "$t0" "$t1" >>"$WORK/start-s"
    for b in "${builds[@]}"; do
      bin=$(bin_of "$b")
      drop_cache "$ck"
      timed plain "$b" "$bin" --no-progress convert "$ck" "$plain"
      [ "$i" = 0 ] && [ "${#builds[@]}" = 2 ] && echo "plain $(sha256sum <"$plain" | cut -c1-16)" >>"$WORK/sums-$b"
      rm -f "$plain"
      drop_cache "$ck"
      timed hf "$b" "$bin" --no-progress convert "$ck" "$hf" --to hf --hf-config "$WORK/config.json"
      [ "$i" = 0 ] && [ "${#builds[@]}" = 2 ] && echo "hf $(out_sum "$hf")" >>"$WORK/sums-$b"
      rm -rf "$hf"
      drop_cache "$ck"
      "$bin" --version >/dev/null
      timed hfwarm "$b" "$bin" --no-progress convert "$ck" "$hf" --to hf --hf-config "$WORK/config.json"
      rm -rf "$hf"
      drop_cache "$model"
      timed import "$b" "$bin" --no-progress convert "$model" "$imp" --to megatron --tp 2 --pp 2
      [ "$i" = 0 ] && [ "${#builds[@]}" = 2 ] && echo "import $(out_sum "$imp")" >>"$WORK/sums-$b"
      rm -rf "$imp"
    done
  done
  c=$(median <"$WORK/copy")
  printf '%d layers: checkpoint %.2f GB, model %.2f GB; median of %d; copy %.3f GB/s of output\n' \
    "$layers" "$(du -sb "$ck" | awk '{print $1 / 1e9}')" "$(echo "$out_bytes" | awk '{print $1 / 1e9}')" "$ROUNDS" "$c"
  rs=$(median <"$WORK/ranges-s") ss=$(median <"$WORK/start-s")
  printf '  ranges: the %.2f GB of stored items the export reads, copied in %.3f s; start: %.3f s (cold fpgather --version)\n' \
    "$(echo "$range_bytes" | awk '{print $1 / 1e9}')" "$rs" "$ss"
  for b in "${builds[@]}"; do
    p=$(col 1 "$WORK/r-plain-$b") h=$(col 1 "$WORK/r-hf-$b") m=$(col 1 "$WORK/r-import-$b")
    printf '  %s: plain export %.3f GB/s, %.2f CPU s; hf export %.3f GB/s (%.2f of the copy, %.2f of plain), %.2f CPU s, peak RSS %d MiB\n' \
      "$b" "$p" "$(col 2 "$WORK/r-plain-$b")" "$h" "$(echo "$h $c" | awk '{print $1 / $2}')" "$(echo "$h $p" | awk '{print $1 / $2}')" \
      "$(col 2 "$WORK/r-hf-$b")" "$(($(col 3 "$WORK/r-hf-$b") / 1024))"
    w=$(col 1 "$WORK/r-hfwarm-$b")
    printf '  %s: hf export, binary warm %.3f GB/s (%.2f of the copy), peak RSS %d MiB\n' "$b" "$w" \
      "$(echo "$w $c" | awk '{print $1 / $2}')" "$(($(col 3 "$WORK/r-hfwarm-$b") / 1024))"
    hs=$(echo "$out_bytes $h" | awk '{print $1 / $2 / 1e9}')
    printf '  %s: hf export %.3f s: %.2f of the ranges copy'"'"'s rate (ranges s / hf s)\n' "$b" "$hs" "$(echo "$rs $hs" | awk '{print $1 / $2}')"
    printf '  %s: import (the HF model back, --tp 2 --pp 2) %.3f GB/s (%.2f of the copy), %.2f CPU s, peak RSS %d MiB\n' \
      "$b" "$m" "$(echo "$m $c" | awk '{print $1 / $2}')" "$(col 2 "$WORK/r-import-$b")" "$(($(col 3 "$WORK/r-import-$b") / 1024))"
    echo "  $b rounds (GB/s): plain $(cut -d' ' -f1 "$WORK/r-plain-$b" | tr '\n' ' '); hf $(cut -d' ' -f1 "$WORK/r-hf-$b" | tr '\n' ' '); hf-warm $(cut -d' ' -f1 "$WORK/r-hfwarm-$b" | tr '\n' ' '); import $(cut -d' ' -f1 "$WORK/r-import-$b" | tr '\n' ' ')"
  done
  echo "  copy rounds (GB/s): $(tr '\n' ' ' <"$WORK/copy"); ranges rounds (s): $(tr '\n' ' ' <"$WORK/ranges-s"); start rounds (s): $(tr '\n' ' ' <"$WORK/start-s")"
  if [ "${#builds[@]}" = 2 ]; then
    if cmp -s "$WORK/sums-before" "$WORK/sums-now"; then echo "  outputs: before and now identical (sha256)"
    else echo "  outputs DIFFER: before $(tr '\n' ' ' <"$WORK/sums-before"); now $(tr '\n' ' ' <"$WORK/sums-now")"; fi
    rm -f "$WORK"/sums-*
  fi
  rm -rf "$ck" "$model" "$WORK/same-size"
done
