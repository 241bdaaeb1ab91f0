#!/usr/bin/env bash
# A file size limit (ulimit -f): `train --save`, `reshard` and `convert --compress` fail with exit 3
# and "file size limit exceeded" wherever a file outgrows it (SIGXFSZ is ignored, the write fails
# with EFBIG): no signal, no staging directory left, the previous checkpoint intact. The limit is
# swept over the last stretch of the largest data file's size, where its chunks and its closing run
# out.
source "$(dirname "$0")/common.sh"
F=(timeout 120 "$FPGATHER" --no-progress)

failed=0
# limited KB CMD...: CMD under `ulimit -f KB`; stdout, stderr and the exit code in $WORK/{out,err,code}.
limited() {
  local kb=$1
  shift
  bash -c 'ulimit -f "$0" && exec "$@"' "$kb" "$@" >"$WORK/out" 2>"$WORK/err"
  echo $? >"$WORK/code"
}
# outcome WHAT DIR: the last command succeeded or failed cleanly, leaving no staging in DIR.
outcome() {
  local code staging
  code=$(cat "$WORK/code")
  if [ "$code" -eq 3 ]; then
    failed=$((failed + 1))
    grep -qF "file size limit exceeded" "$WORK/err" || fail "$1: exit 3 without 'file size limit exceeded': $(head -c 300 "$WORK/err")"
  elif [ "$code" -ne 0 ]; then
    fail "$1: exit $code (a signal if over 128): $(head -c 300 "$WORK/err")"
  fi
  staging=$(find "$2" -name '.*.tmp-*')
  [ -z "$staging" ] || fail "$1: staging left: $staging"
}
# sweep_over DIR: limits in KiB to try for writing what DIR holds: tiny, a quarter and a half of its
# largest file, then its last 16 KiB in steps of 1 KiB, and a bit more.
sweep_over() {
  local largest kb
  largest=$(($(find "$1" -type f -printf '%s\n' | sort -n | tail -1) / 1024))
  sweep=(1 $((largest / 4)) $((largest / 2)))
  for ((kb = largest - 16; kb <= largest + 4; kb += 1)); do sweep+=("$kb"); done
}

expect_exit 0 "${F[@]}" train --steps 1 --save "$WORK/root"
sweep_over "$WORK/root/step-00000001"
for kb in "${sweep[@]}"; do
  limited "$kb" "${F[@]}" train --steps 2 --load "$WORK/root" --save "$WORK/root"
  outcome "train --save under ulimit -f $kb" "$WORK/root"
  expect_exit 0 "${F[@]}" validate --data "$WORK/root/step-00000001"
  expect_exit 0 "${F[@]}" validate --data "$WORK/root"
  rm -rf "$WORK/root/step-00000002"
  printf 'step-00000001\n' >"$WORK/root/latest"
done
[ "$failed" -gt 0 ] && [ "$failed" -lt "${#sweep[@]}" ] ||
  fail "train --save: $failed of ${#sweep[@]} saves failed; the sweep must cross the size of a data file"

for cmd in "reshard --dp 1 --compress none" "convert --compress none"; do
  read -r -a c <<<"$cmd"
  expect_exit 0 "${F[@]}" "${c[@]:0:1}" "$WORK/root" "$WORK/target" "${c[@]:1}"
  sweep_over "$WORK/target"
  rm -rf "$WORK/target"
  failed=0
  for kb in "${sweep[@]}"; do
    limited "$kb" "${F[@]}" "${c[@]:0:1}" "$WORK/root" "$WORK/target" "${c[@]:1}"
    outcome "$cmd under ulimit -f $kb" "$WORK"
    if [ "$(cat "$WORK/code")" -eq 3 ] && [ -e "$WORK/target" ]; then fail "$cmd: a failed write left $WORK/target"; fi
    rm -rf "$WORK/target"
  done
  [ "$failed" -gt 0 ] && [ "$failed" -lt "${#sweep[@]}" ] ||
    fail "$cmd: $failed of ${#sweep[@]} writes failed; the sweep must cross the size of a data file"
done
finish
