#!/usr/bin/env bash
# A safetensors model as a checkpoint of weights: validate (headers; --data reads every tensor back),
# inspect --key, diff of two models and of a model against a checkpoint export, and what no format
# recognises.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
M="$TESTDATA/models/tiny-llama.safetensors"

expect_exit 0 "${F[@]}" validate "$M"
expect_in "$WORK/out" "valid: safetensors, "
expect_in "$WORK/out" " tensors, 1 file; 0 problems"
expect_exit 0 "${F[@]}" validate --data "$M"
expect_in "$WORK/out" " tensors read; 0 problems"
expect_exit 0 "${F[@]}" --json validate --data "$M"
expect_in "$WORK/out" '"format": "safetensors"'
expect_in "$WORK/out" '"valid": true'

expect_exit 0 "${F[@]}" inspect --key lm_head.weight "$M"
expect_in "$WORK/out" "lm_head.weight: BF16"
expect_in "$WORK/out" "tiny-llama.safetensors at byte"
expect_exit 2 "${F[@]}" inspect --key nope "$M"
expect_in "$WORK/err" "no tensor named 'nope'"

# A copy is equal to it; a copy with one byte of tensor data changed is not, and names the tensor.
cp "$M" "$WORK/a.safetensors"
expect_exit 0 "${F[@]}" diff "$M" "$WORK/a.safetensors"
expect_in "$WORK/out" "equal: "
cp "$M" "$WORK/b.safetensors"
size=$(stat -c %s "$WORK/b.safetensors")
printf '\x55' | dd of="$WORK/b.safetensors" bs=1 seek=$((size - 1)) conv=notrunc status=none
expect_exit 1 "${F[@]}" diff "$M" "$WORK/b.safetensors"
expect_in "$WORK/out" "values"
expect_in "$WORK/out" "DIFFERENT: "

# A truncated file is refused at open, naming the file (exit 3).
head -c $((size - 16)) "$M" >"$WORK/short.safetensors"
expect_exit 3 "${F[@]}" validate "$WORK/short.safetensors"
expect_in "$WORK/err" "short.safetensors"

# A model directory.
mkdir -p "$WORK/hf" && cp "$M" "$WORK/hf/model.safetensors"
expect_exit 0 "${F[@]}" validate "$WORK/hf"
expect_exit 0 "${F[@]}" diff "$WORK/hf" "$M"

# A model holds no optimizer state to reshard (usage, exit 2).
expect_exit 2 "${F[@]}" reshard "$M" "$WORK/resharded" --dp 2
expect_in "$WORK/err" "holds no optimizer state to reshard"
[ ! -e "$WORK/resharded" ] || fail "reshard of a model left $WORK/resharded"

# A directory no format recognises, and a path that is not there.
mkdir -p "$WORK/empty"
expect_exit 3 "${F[@]}" validate "$WORK/empty"
expect_in "$WORK/err" "not a checkpoint: a directory holding no index.h5 or latest (fpgather), .metadata"
expect_exit 3 "${F[@]}" inspect "$WORK/missing"
expect_in "$WORK/err" "missing: no such file or directory"
finish
