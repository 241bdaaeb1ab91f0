#!/usr/bin/env bash
# train --save / --load: a run resumed from a checkpoint continues bitwise as if uninterrupted
# (lib/ARCHITECTURE.md invariant 4), checkpoints validate with --data, retention and refusals.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
for cfg in "--fp8 none" "--fp8 delayed --optimizer lion" "--optimizer muon --fp8 blockwise"; do
  read -r -a c <<<"$cfg"
  tag=$(echo "$cfg" | tr -c 'a-z0-9' '_')
  expect_exit 0 "${F[@]}" train --steps 16 "${c[@]}" --save "$WORK/$tag-full" --metrics "$WORK/$tag-full.jsonl"
  expect_exit 0 "${F[@]}" train --steps 8 "${c[@]}" --save "$WORK/$tag-part" --ckpt-layout bucket --compress none
  expect_exit 0 "${F[@]}" train --steps 16 "${c[@]}" --load "$WORK/$tag-part" --save "$WORK/$tag-part" \
    --metrics "$WORK/$tag-resumed.jsonl"
  expect_in "$WORK/out" "resumed from $WORK/$tag-part/step-00000008 at step 8"
  # the same losses for steps 8..15, and the same final state value by value
  # (timings aside: they differ from run to run)
  tail -n 8 "$WORK/$tag-full.jsonl" | sed 's/,"times":{[^}]*}//' >"$WORK/a.jsonl"
  sed 's/,"times":{[^}]*}//' "$WORK/$tag-resumed.jsonl" >"$WORK/b.jsonl"
  grep -q '"loss"' "$WORK/b.jsonl" || fail "$cfg: no metrics"
  cmp -s "$WORK/a.jsonl" "$WORK/b.jsonl" || fail "$cfg: resumed metrics differ from the uninterrupted run"
  expect_exit 0 "${F[@]}" validate --data "$WORK/$tag-part"
  expect_exit 0 "${F[@]}" diff "$WORK/$tag-full" "$WORK/$tag-part"
  expect_in "$WORK/out" "equal"
done
# a checkpoint of another DP size or optimizer is refused, naming what differs
expect_exit 2 "${F[@]}" train --steps 20 --dp 3 --load "$WORK/__fp8_none_-full"
expect_in "$WORK/err" "reshard"
expect_exit 2 "${F[@]}" train --steps 20 --optimizer lion --load "$WORK/__fp8_none_-full"
# retention: --keep 2 leaves the two newest and latest
expect_exit 0 "${F[@]}" train --steps 6 --save "$WORK/keep" --save-every 2 --keep 2 --compress zstd:3+shuffle
[ "$(ls "$WORK/keep" | tr '\n' ' ')" = "latest step-00000004 step-00000006 " ] || fail "--keep 2 left: $(ls "$WORK/keep")"
expect_exit 2 "${F[@]}" train --steps 4 --save-every 2
expect_exit 2 "${F[@]}" train --steps 4 --save "$WORK/x" --ckpt-layout rows
finish
