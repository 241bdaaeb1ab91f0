#!/usr/bin/env bash
# The export of one `base` checkpoint (fp32 weights + states, 1.99 GB) in rounds, each format
# beside the other: `bench export` (safetensors, then DCP: cold source, output on the disk, against
# the duplex rate measured in the same run), and `convert` timed with its output on /dev/shm (the
# read side alone: cold source) and from a warm source onto the disk (the write side alone).
# Runs as root (it drops the page cache).
#
#   [ROUNDS="1 2 3"] bash scripts/bench-export-rounds.sh FPGATHER DIR
set -uo pipefail
F=${1:?FPGATHER binary}; d=$(mktemp -d "${2:?directory on the disk}/export-rounds-XXXX")
shm=$(mktemp -u /dev/shm/export-rounds-XXXX)
trap 'rm -rf "$d" "$shm"' EXIT
"$F" --no-progress train --model base --steps 1 --dp 1 --compress none --save "$d/ckpt" >/dev/null || exit 1
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
timed() {  # seconds of a command, or its error
  local s e
  s=$(date +%s.%N)
  "$@" >/dev/null 2>"$d/err" || { cat "$d/err"; return; }
  e=$(date +%s.%N)
  awk -v a="$s" -v b="$e" 'BEGIN{printf "%.2f s", b-a}'
}
for r in ${ROUNDS:-1 2 3}; do
  echo "== round $r"
  for to in safetensors dcp; do
    "$F" bench export "$d/ckpt" --dir "$d" --to $to | grep -E "^(duplex|export|ratio)"
  done
  for to in safetensors dcp; do
    rm -rf "$shm"; cold
    echo "$to, cold source -> /dev/shm: $(timed "$F" --no-progress convert "$d/ckpt" "$shm" --to $to --states --dtype fp32)"
    rm -rf "$shm"; cat "$d"/ckpt/*/* >/dev/null 2>&1
    echo "$to, warm source -> disk: $(timed "$F" --no-progress convert "$d/ckpt" "$d/out" --to $to --states --dtype fp32)"
    rm -rf "$d/out"
  done
done
