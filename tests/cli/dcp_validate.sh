#!/usr/bin/env bash
# fpgather validate, inspect, diff and convert on PyTorch DCP checkpoints written by torch
# (testdata/dcp, make_dcp_fixtures.py) and on hand-broken ones: each defect named with exit 1, hostile
# metadata refused with exit 3, nothing read outside the checkpoint, never a signal or a hang.
source "$(dirname "$0")/common.sh"
D="$TESTDATA/dcp"
F=(timeout 60 "$FPGATHER" --no-progress)

for c in torch_save_4ranks safetensors_4ranks small; do
  expect_exit 0 "${F[@]}" validate --data "$D/$c"
  expect_in "$WORK/out" "valid: PyTorch DCP"
  expect_exit 0 "${F[@]}" inspect --keys "$D/$c"
  expect_in "$WORK/out" "PyTorch DCP"
done
expect_exit 0 "${F[@]}" inspect "$D/safetensors_4ranks"
expect_in "$WORK/out" "safetensors items"
# The same state in both serializations compares equal.
expect_exit 0 "${F[@]}" diff "$D/torch_save_4ranks" "$D/safetensors_4ranks"
expect_in "$WORK/out" "equal:"
expect_exit 0 "${F[@]}" convert "$D/torch_save_4ranks" "$WORK/t.safetensors" --states --dtype fp32
expect_exit 0 "${F[@]}" inspect "$WORK/t.safetensors"

expect_exit 1 "${F[@]}" validate --data "$D/broken/crc_flip"
expect_in "$WORK/out" "CRC-32"
expect_exit 1 "${F[@]}" validate "$D/broken/escape_path"
expect_in "$WORK/out" "not a plain file name inside the checkpoint directory"
expect_exit 1 "${F[@]}" validate "$D/broken/symlink_item"
expect_in "$WORK/out" "symbolic link"
expect_exit 3 "${F[@]}" validate "$D/broken/forbidden_global"
expect_in "$WORK/err" "pickle global 'os.system' is not allowed"
expect_exit 3 "${F[@]}" inspect "$D/broken/forbidden_global"
expect_exit 3 "${F[@]}" validate "$D/broken/truncated_metadata"
expect_in "$WORK/err" "runs past the end"
# Commands that use a checkpoint refuse an invalid one, naming the problem; --no-validate salvages.
expect_exit 1 "${F[@]}" diff "$D/broken/escape_path" "$D/torch_save_4ranks"
expect_in "$WORK/err" "refusing to compare it"
expect_exit 1 "${F[@]}" convert "$D/broken/symlink_item" "$WORK/x.safetensors"
expect_in "$WORK/err" "refusing to export it"

# The broken .metadata variants: each copied beside the good data files, each a named problem.
for m in "$D"/broken/*.metadata; do
  name=$(basename "$m" .metadata)
  mkdir -p "$WORK/$name"
  cp "$D"/torch_save_4ranks/__*.distcp "$WORK/$name/"
  cp "$m" "$WORK/$name/.metadata"
  expect_exit 1 "${F[@]}" validate "$WORK/$name"
done
finish
