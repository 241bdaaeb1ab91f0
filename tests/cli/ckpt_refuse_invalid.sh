#!/usr/bin/env bash
# Commands that use a checkpoint validate it first: train --load, diff, convert and reshard refuse
# every broken fixture that the index checks reject (exit 1, the problems listed as validate lists
# them), and a training checkpoint whose data cursor was edited in place (the index checksum).
# --no-validate salvages with diff and convert's export only.
source "$(dirname "$0")/common.sh"
CK="$TESTDATA/ckpt"
F=("$FPGATHER" --no-progress)
G=$(ls -d "$CK"/golden-v*/ | tail -1)
cd "$WORK" || exit 1

for exp in "$CK"/expected/*.txt; do
  name=$(basename "$exp" .txt)
  case $name in flipped-bit | swapped-keys | moved-chunk | rank-file-external-link) continue ;; esac  # data-only
  [ "$(head -1 "$exp")" = "exit 1" ] || continue  # unreadable (a newer version, the hostile ones: ckpt_hostile.sh)
  first=$(sed -n 2p "$exp")  # the first problem line validate prints
  expect_exit 1 "${F[@]}" train --steps 9 --load "$CK/broken/$name"
  expect_in "$WORK/err" "refusing to resume from it:"
  expect_in "$WORK/err" "$first"
  expect_exit 1 "${F[@]}" convert "$CK/broken/$name" "$WORK/$name.safetensors"
  expect_in "$WORK/err" "refusing to export it:"
  [ -e "$WORK/$name.safetensors" ] && fail "convert of $name wrote an export"
  expect_exit 1 "${F[@]}" convert "$CK/broken/$name" "$WORK/$name-none" --compress none
  expect_in "$WORK/err" "refusing to rewrite it:"
  expect_exit 1 "${F[@]}" reshard "$CK/broken/$name" "$WORK/$name-dp2" --dp 2
  expect_in "$WORK/err" "refusing to reshard it:"
  [ -e "$WORK/$name-dp2" ] && fail "reshard of $name wrote a target"
  expect_exit 1 "${F[@]}" diff "$G" "$CK/broken/$name"
  expect_in "$WORK/err" "$first"
done

# Salvage: the values a checkpoint with a data chunk declared as padding still holds.
expect_exit 0 "${F[@]}" convert --no-validate "$CK/broken/chunk-as-padding" "$WORK/salvaged.safetensors"
expect_exit 1 "${F[@]}" diff --no-validate "$CK/broken/chunk-as-padding" "$G"
expect_in "$WORK/out" "optimizer/buffer0/bucket0/exp_avg: coverage: 0 elements are data in A only, 32 in B only"
# Not to write a checkpoint from an invalid one, and not for a safetensors input.
expect_exit 2 "${F[@]}" convert --no-validate "$CK/broken/chunk-as-padding" "$WORK/x" --compress none
expect_exit 2 "${F[@]}" convert --no-validate "$WORK/salvaged.safetensors" "$WORK/y.safetensors" --fp8 tensorwise

# A training checkpoint whose data cursor was edited in place (8 -> 7): the index no longer matches
# its checksum, so nothing resumes from it (the run would draw other data) nor uses it.
expect_exit 0 "${F[@]}" train --steps 8 --save run
idx=run/step-00000008/index.h5
grep -qa '"next_step":8' "$idx" || fail "no next_step in $idx"
perl -0777 -pi -e 's/"next_step":8/"next_step":7/' "$idx"
expect_exit 1 "${F[@]}" validate run
expect_in "$WORK/out" "index_checksum - [0, 0) index.h5: the index was changed after it was written"
expect_exit 1 "${F[@]}" train --steps 12 --load run --save run
expect_in "$WORK/err" "refusing to resume from it:"
expect_in "$WORK/err" "index_checksum"
expect_exit 1 "${F[@]}" reshard run run-dp1 --dp 1 --accumulation 2
expect_exit 1 "${F[@]}" convert run run.safetensors
expect_exit 0 "${F[@]}" convert --no-validate run run.safetensors
expect_in "$WORK/err" "does not match its checksum"
expect_exit 1 "${F[@]}" convert run run2 --fp8 tensorwise
expect_in "$WORK/err" "refusing to re-encode it:"
expect_exit 0 "${F[@]}" inspect run
expect_in "$WORK/out" "INDEX ALTERED"
finish
