#!/usr/bin/env bash
# Megatron torch_dist benchmarks of BENCHMARKS.md ("Megatron at model parallelism"), measured in one run:
#
#  1. index: a synthetic dp_reshardable checkpoint of TP 8 x PP 8 (64 optimizer groups) x DP 32 with
#     about 1M chunks (`fpgather bench megatron-make`, $LAYERS layers of hidden 128, buckets of 4000
#     elements); `inspect` and index-only `validate` timed end to end as a user runs them, on one core
#     (taskset -c 0, --threads 1), $REPS times each: wall, user and system seconds and peak RSS, medians.
#  2. export: a synthetic TP 2 x PP 2 x DP 2 checkpoint of $EXPORT_LAYERS layers of hidden 1024;
#     $ROUNDS rounds, each: the page cache dropped, the checkpoint's files read in file order with dd
#     (the disk's cold-read rate of these bytes); dropped again, the same files copied into one file in
#     $EXPORT_OUT with cat (the duplex rate: read these bytes, write as many); dropped again,
#     `convert --states --dtype fp32` to
#     $EXPORT_OUT (tmpfs by default, so that the disk only reads). The export's read rate is the
#     checkpoint's bytes over its wall time; medians and its ratios to both.
# With BEFORE (another fpgather build), every timing of parts 1-3 is taken of it too, in turn with
# FPGATHER's in each repetition or round (before, now, before, now, …), each with its own medians.
#  3. reshard: the same checkpoint, $ROUNDS rounds, each: the page cache dropped, its files copied into
#     a directory on the same disk and synced (cp + sync: the disk's duplex rate, these bytes read and
#     as many written); then per case of $RESHARD (the page cache dropped before each) `reshard` into
#     the same disk (committed with fsync, as it always is): --dp 4 (every group re-bucketed at its
#     TP x PP), --tp 1 --pp 1 --dp 2 (the model-parallel rewrite), --to fully_reshardable. Rates are
#     the source's bytes over the wall time; medians, their ratios to the copy, CPU seconds (user +
#     system, medians; the copy's too) and peak RSS.
#
# Usage: scripts/bench-megatron.sh [WORK_DIR]   (default /tmp/fpgather-bench-megatron, removed at the end)
# Environment: FPGATHER (default build/fpgather), LAYERS (416), REPS (5), EXPORT_LAYERS (24), ROUNDS (3),
# EXPORT_OUT (/dev/shm), RESHARD ("dp tp full"; "" skips part 3), BEFORE (another fpgather build timed
# beside FPGATHER in each repetition and round), SKIP_INDEX=1 / SKIP_EXPORT=1 skip part 1 / part 2's timing,
# KEEP=1 keeps WORK_DIR. Dropping the page cache needs root; otherwise each file is evicted with `dd
# iflag=nocache`.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
FPGATHER=${FPGATHER:-$SRC/build/fpgather}
LAYERS=${LAYERS:-416}
REPS=${REPS:-5}
EXPORT_LAYERS=${EXPORT_LAYERS:-24}
ROUNDS=${ROUNDS:-3}
EXPORT_OUT=${EXPORT_OUT:-/dev/shm}
WORK=${1:-/tmp/fpgather-bench-megatron}
[ -x "$FPGATHER" ] || { echo "no fpgather binary at $FPGATHER (set FPGATHER)" >&2; exit 2; }
[ -z "${BEFORE:-}" ] || [ -x "$BEFORE" ] || { echo "no fpgather binary at $BEFORE (BEFORE)" >&2; exit 2; }
# The builds timed: FPGATHER ("now") and, with BEFORE, that one ("before") ahead of it every time.
builds=(now)
[ -n "${BEFORE:-}" ] && builds=(before now)
bin_of() { [ "$1" = before ] && echo "$BEFORE" || echo "$FPGATHER"; }
[ -e "$WORK" ] && { echo "$WORK exists; give another WORK_DIR" >&2; exit 2; }
mkdir -p "$WORK"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT

drop_cache() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then
    echo 3 >/proc/sys/vm/drop_caches
  else
    find "$@" -type f -exec dd if={} iflag=nocache count=0 status=none \;
  fi
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
core=(taskset -c 0)
command -v taskset >/dev/null || core=()

echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg)"
for b in "${builds[@]}"; do echo "$b: $("$(bin_of "$b")" --version | head -1)"; done

# 1. index work
if [ "${SKIP_INDEX:-0}" != 1 ]; then
"$FPGATHER" --no-progress bench megatron-make "$WORK/idx" --tp 8 --pp 8 --dp 32 --layers "$LAYERS" --hidden 128 \
  --ffn 256 --heads 8 --query-groups 8 --vocab 4096 --bucket-size 4000
for cmd in inspect validate; do
  for b in "${builds[@]}"; do : >"$WORK/$cmd-$b.times"; done
  for ((i = 0; i < REPS; i++)); do
    for b in "${builds[@]}"; do
      /usr/bin/time -f "%e %U %S %M" -a -o "$WORK/$cmd-$b.times" "${core[@]}" "$(bin_of "$b")" --threads 1 --no-progress $cmd \
        "$WORK/idx" >"$WORK/$cmd.out"
    done
  done
  tail -1 "$WORK/$cmd.out" | cut -c1-160
  for b in "${builds[@]}"; do
    t="$WORK/$cmd-$b.times"
    printf '%-9s %-6s one core, median of %d: %.2f s wall, %.2f s user, %.2f s sys, peak RSS %.0f MiB (walls: %s)\n' "$cmd" "$b" \
      "$REPS" "$(cut -d' ' -f1 "$t" | median)" "$(cut -d' ' -f2 "$t" | median)" "$(cut -d' ' -f3 "$t" | median)" \
      "$(cut -d' ' -f4 "$t" | median | awk '{print $1 / 1024}')" "$(cut -d' ' -f1 "$t" | tr '\n' ' ')"
  done
done
rm -rf "$WORK/idx"
fi

# 2. export
"$FPGATHER" --no-progress bench megatron-make "$WORK/exp" --tp 2 --pp 2 --dp 2 --layers "$EXPORT_LAYERS" --hidden 1024 \
  --ffn 4096 --heads 16 --query-groups 8 --vocab 32768 --bucket-size 40000000
bytes=$(du -sb "$WORK/exp" | cut -f1)
: >"$WORK/plain.rates"
: >"$WORK/copy.rates"
for b in "${builds[@]}"; do : >"$WORK/export-$b.rates"; : >"$WORK/export-$b.rss"; done
for ((i = 0; i < ROUNDS; i++)); do
  [ "${SKIP_EXPORT:-0}" = 1 ] && break
  drop_cache "$WORK/exp"
  t0=$(date +%s.%N)
  for f in "$WORK"/exp/.metadata "$WORK"/exp/*; do dd if="$f" of=/dev/null bs=16M status=none; done
  t1=$(date +%s.%N)
  echo "$bytes $t0 $t1" | awk '{print $1 / ($3 - $2) / 1e9}' >>"$WORK/plain.rates"
  drop_cache "$WORK/exp"
  t0=$(date +%s.%N)
  cat "$WORK"/exp/.metadata "$WORK"/exp/* >"$EXPORT_OUT/fpgather-bench-megatron-copy"
  t1=$(date +%s.%N)
  rm -f "$EXPORT_OUT/fpgather-bench-megatron-copy"
  echo "$bytes $t0 $t1" | awk '{print $1 / ($3 - $2) / 1e9}' >>"$WORK/copy.rates"
  for b in "${builds[@]}"; do
    drop_cache "$WORK/exp"
    out="$EXPORT_OUT/fpgather-bench-megatron-export.safetensors"
    rm -f "$out"
    /usr/bin/time -f "%e %M" -o "$WORK/export.time" "$(bin_of "$b")" --no-progress convert "$WORK/exp" "$out" --states --dtype fp32 >/dev/null
    rm -f "$out"
    read -r wall rss <"$WORK/export.time"
    echo "$bytes $wall" | awk '{print $1 / $2 / 1e9}' >>"$WORK/export-$b.rates"
    echo "$((rss / 1024))" >>"$WORK/export-$b.rss"
  done
done
if [ "${SKIP_EXPORT:-0}" != 1 ]; then
plain=$(median <"$WORK/plain.rates")
copy=$(median <"$WORK/copy.rates")
printf 'export of %.2f GB (cold, to %s), median of %d: plain read %.3f GB/s, plain copy to %s %.3f GB/s\n' \
  "$(echo "$bytes" | awk '{print $1 / 1e9}')" "$EXPORT_OUT" "$ROUNDS" "$plain" "$EXPORT_OUT" "$copy"
for b in "${builds[@]}"; do
  rate=$(median <"$WORK/export-$b.rates")
  printf '  %-6s export %.3f GB/s: %.2f of the read, %.2f of the copy; peak RSS %s MiB (rounds: %s)\n' "$b" "$rate" \
    "$(echo "$rate $plain" | awk '{print $1 / $2}')" "$(echo "$rate $copy" | awk '{print $1 / $2}')" \
    "$(sort -g "$WORK/export-$b.rss" | tail -1)" "$(tr '\n' ' ' <"$WORK/export-$b.rates")"
done
echo "rounds: read $(tr '\n' ' ' <"$WORK/plain.rates"); copy $(tr '\n' ' ' <"$WORK/copy.rates")"
fi

# 3. reshard into the same disk, against a synced copy of the same files
RESHARD=${RESHARD-"dp tp full"}
if [ -n "$RESHARD" ]; then
  reshard_opts() {
    case $1 in
      dp) echo "--dp 4" ;;
      tp) echo "--tp 1 --pp 1 --dp 2 --bucket-size 40000000" ;;
      full) echo "--dp 2 --to fully_reshardable" ;;
    esac
  }
  : >"$WORK/dup.rates"
  : >"$WORK/dup.cpu"
  for c in $RESHARD; do for b in "${builds[@]}"; do : >"$WORK/reshard-$c-$b.rates"; : >"$WORK/reshard-$c-$b.rss"; : >"$WORK/reshard-$c-$b.cpu"; done; done
  for ((i = 0; i < ROUNDS; i++)); do
    drop_cache "$WORK/exp"
    /usr/bin/time -f "%e %U %S" -o "$WORK/dup.time" sh -c 'cp -r "$1" "$2" && sync' sh "$WORK/exp" "$WORK/dup"
    rm -rf "$WORK/dup"
    read -r wall user sys <"$WORK/dup.time"
    echo "$bytes $wall" | awk '{print $1 / $2 / 1e9}' >>"$WORK/dup.rates"
    echo "$user $sys" | awk '{print $1 + $2}' >>"$WORK/dup.cpu"
    for c in $RESHARD; do
      for b in "${builds[@]}"; do
        drop_cache "$WORK/exp"
        /usr/bin/time -f "%e %M %U %S" -o "$WORK/reshard.time" "$(bin_of "$b")" --no-progress reshard "$WORK/exp" "$WORK/out-$c" \
          $(reshard_opts "$c") >/dev/null
        rm -rf "$WORK/out-$c"
        read -r wall rss user sys <"$WORK/reshard.time"
        echo "$bytes $wall" | awk '{print $1 / $2 / 1e9}' >>"$WORK/reshard-$c-$b.rates"
        echo "$user $sys" | awk '{print $1 + $2}' >>"$WORK/reshard-$c-$b.cpu"
        echo "$((rss / 1024))" >>"$WORK/reshard-$c-$b.rss"
      done
    done
  done
  dup=$(median <"$WORK/dup.rates")
  printf 'reshard of %.2f GB (cold, into %s), median of %d: synced copy %.3f GB/s, %.2f CPU s (rounds: %s)\n' \
    "$(echo "$bytes" | awk '{print $1 / 1e9}')" "$WORK" "$ROUNDS" "$dup" "$(median <"$WORK/dup.cpu")" \
    "$(tr '\n' ' ' <"$WORK/dup.rates")"
  for c in $RESHARD; do
    for b in "${builds[@]}"; do
      rate=$(median <"$WORK/reshard-$c-$b.rates")
      printf '  %-6s reshard %-44s %.3f GB/s = %.2f of the copy, %.2f CPU s, peak RSS %s MiB (rounds: %s)\n' "$b" \
        "$(reshard_opts "$c")" "$rate" "$(echo "$rate $dup" | awk '{print $1 / $2}')" "$(median <"$WORK/reshard-$c-$b.cpu")" \
        "$(sort -g "$WORK/reshard-$c-$b.rss" | tail -1)" \
        "$(tr '\n' ' ' <"$WORK/reshard-$c-$b.rates")"
    done
  done
fi
