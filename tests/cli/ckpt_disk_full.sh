#!/usr/bin/env bash
# A full disk, a small tmpfs (mounting needs root: skipped where it is not permitted): `train
# --save`, `reshard` and `convert --compress` into it fail with exit 3 and "no space left on device"
# wherever the space runs out (a chunk, a data file's or the index's closing, `latest`): no signal,
# no staging directory left, the previous checkpoint intact. The free space is swept over the last
# stretch of a checkpoint's size, where every stage of a save runs out once.
source "$(dirname "$0")/common.sh"
F=(timeout 120 "$FPGATHER" --no-progress)
DISK="$WORK/disk"
mkdir -p "$DISK"
if ! mount -t tmpfs -o size=8m tmpfs "$DISK" 2>/dev/null; then
  echo "cannot mount a tmpfs here (not root?): skipped"
  exit 77
fi
trap 'umount "$DISK"; rm -rf "$WORK"' EXIT

# leave BYTES: fills the disk up to BYTES of free space.
leave() {
  rm -f "$DISK/filler"
  local avail
  avail=$(df -B1 --output=avail "$DISK" | tail -1)
  [ "$avail" -gt "$1" ] && fallocate -l $((avail - $1)) "$DISK/filler"
}

# outcome WHAT: the last command either succeeded or failed cleanly; counts the failures.
failed=0
outcome() {
  local code
  code=$(cat "$WORK/code")
  if [ "$code" -eq 3 ]; then
    failed=$((failed + 1))
    grep -qF "no space left on device" "$WORK/err" || fail "$1: exit 3 without 'no space left on device': $(head -c 300 "$WORK/err")"
  elif [ "$code" -ne 0 ]; then
    fail "$1: exit $code (a signal if over 128): $(head -c 300 "$WORK/err")"
  fi
  local staging
  staging=$(find "$DISK" -name '.*.tmp-*')
  [ -z "$staging" ] || fail "$1: staging left: $staging"
}

run() {  # run CMD...: stdout, stderr and the exit code in $WORK/{out,err,code}
  "$@" >"$WORK/out" 2>"$WORK/err"
  echo $? >"$WORK/code"
}

# sweep_over DIR: free space to try for writing what DIR holds: none, a quarter, a half, then the
# last 96 KiB of its size (closing the data files and the index) in steps of 8 KiB, and a bit more.
sweep_over() {
  local size b
  size=$(du -sb "$1" | cut -f1)
  sweep=(0 $((size / 4)) $((size / 2)))
  for ((b = size - 96 * 1024; b <= size + 16 * 1024; b += 8 * 1024)); do sweep+=("$b"); done
}

# The previous checkpoint.
expect_exit 0 "${F[@]}" train --steps 1 --save "$DISK/root"
sweep_over "$DISK/root/step-00000001"

for free in "${sweep[@]}"; do
  leave "$free"
  run "${F[@]}" train --steps 2 --load "$DISK/root" --save "$DISK/root"
  outcome "train --save with $free bytes free"
  run "${F[@]}" validate --data "$DISK/root/step-00000001"
  [ "$(cat "$WORK/code")" -eq 0 ] || fail "free $free: the previous checkpoint no longer validates: $(cat "$WORK/out")"
  run "${F[@]}" validate --data "$DISK/root"
  [ "$(cat "$WORK/code")" -eq 0 ] || fail "free $free: latest does not validate: $(cat "$WORK/out" "$WORK/err")"
  # Back to the previous checkpoint alone.
  rm -rf "$DISK/root/step-00000002"
  printf 'step-00000001\n' >"$DISK/root/latest"
done
[ "$failed" -gt 0 ] && [ "$failed" -lt "${#sweep[@]}" ] ||
  fail "train --save: $failed of ${#sweep[@]} saves failed; the sweep must cross the size of a checkpoint"

# reshard and convert --compress read a checkpoint elsewhere and write into the full disk.
expect_exit 0 "${F[@]}" train --steps 1 --save "$WORK/src"
for cmd in "reshard --dp 1 --compress none" "convert --compress none"; do
  read -r -a c <<<"$cmd"
  rm -f "$DISK/filler"
  expect_exit 0 "${F[@]}" "${c[@]:0:1}" "$WORK/src" "$DISK/out" "${c[@]:1}"
  sweep_over "$DISK/out"
  rm -rf "$DISK/out"
  failed=0
  for free in "${sweep[@]}"; do
    leave "$free"
    run "${F[@]}" "${c[@]:0:1}" "$WORK/src" "$DISK/out" "${c[@]:1}"
    outcome "$cmd with $free bytes free"
    if [ "$(cat "$WORK/code")" -eq 3 ] && [ -e "$DISK/out" ]; then fail "$cmd: a failed write left $DISK/out"; fi
    rm -rf "$DISK/out"
  done
  [ "$failed" -gt 0 ] && [ "$failed" -lt "${#sweep[@]}" ] ||
    fail "$cmd: $failed of ${#sweep[@]} writes failed; the sweep must cross the size of a checkpoint"
done
finish
