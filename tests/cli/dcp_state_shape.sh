#!/usr/bin/env bash
# Nothing of a DCP checkpoint is lost without a word: an optimizer state whose key names a parameter
# but whose shape is not the parameter's is a shape problem for validate (from the metadata alone and
# with --data) and makes every per-parameter use (convert, --to dcp, diff) refuse with exit 1, naming
# both keys and both shapes; a storage entry too short for its chunk is a problem from the metadata.
# The checkpoints come from formats/dcp's writer (tests/tools/make_dcp.cpp).
source "$(dirname "$0")/common.sh"
: "${MAKE_DCP:?MAKE_DCP must name the make_dcp tool}"
F=(timeout 60 "$FPGATHER" --no-progress)

C="$WORK/mismatch"
"$MAKE_DCP" tensors "$C" model.decoder.final_layernorm.weight=64 model.decoder.w=4x8 \
  optimizer.state.decoder.final_layernorm.weight.master=65 optimizer.state.decoder.w.master=4x8 \
  optimizer.state.decoder.w.exp_avg=4x8 || fail "make_dcp tensors"
for data in "" --data; do
  expect_exit 1 "${F[@]}" validate $data "$C"
  expect_in "$WORK/out" "shape optimizer.state.decoder.final_layernorm.weight.master"
  expect_in "$WORK/out" "shape [65] is not the shape [64] of its parameter 'decoder.final_layernorm.weight' (key 'model.decoder.final_layernorm.weight')"
  expect_in "$WORK/out" "INVALID"
done
expect_exit 1 "${F[@]}" --json validate "$C"
expect_in "$WORK/out" '"kind": "shape"'
msg="key 'optimizer.state.decoder.final_layernorm.weight.master' has shape [65], its parameter 'decoder.final_layernorm.weight' (key 'model.decoder.final_layernorm.weight') has shape [64]"
expect_exit 1 "${F[@]}" convert "$C" "$WORK/out.safetensors" --states --dtype fp32
expect_in "$WORK/err" "refusing to export it"
expect_in "$WORK/err" "$msg"
[ -e "$WORK/out.safetensors" ] && fail "a refused export left its output"
expect_exit 1 "${F[@]}" convert "$C" "$WORK/out-dcp" --to dcp --states
expect_in "$WORK/err" "$msg"
# --no-validate salvages what validation refuses, never a state it would leave out.
expect_exit 1 "${F[@]}" diff --no-validate "$C" "$C"
expect_in "$WORK/err" "refusing to compare it"
expect_exit 0 "${F[@]}" inspect "$C"
expect_in "$WORK/out" "not the shape of its parameter: $msg"
expect_exit 0 "${F[@]}" --json inspect "$C"
expect_in "$WORK/out" '"parameter_shape"'

# The same checkpoint with the master of the parameter's shape exports every state.
G="$WORK/good"
# A 0-d state (torch's Adam step) is a per-parameter scalar, not a state of another shape.
"$MAKE_DCP" tensors "$G" model.decoder.final_layernorm.weight=64 \
  optimizer.state.decoder.final_layernorm.weight.master=64 optimizer.state.decoder.final_layernorm.weight.step= \
  || fail "make_dcp tensors"
expect_exit 0 "${F[@]}" validate --data "$G"
expect_exit 0 "${F[@]}" convert "$G" "$WORK/good.safetensors" --states --dtype fp32
expect_exit 0 "${F[@]}" inspect "$WORK/good.safetensors"
expect_in "$WORK/out" "decoder.final_layernorm.weight.master"

# Storage entries that cannot hold their chunk: length 0, and shorter than its 256 bytes of elements.
for n in 0 200; do
  "$MAKE_DCP" tensors "$WORK/len$n" w=64 --item-length w "$n" || fail "make_dcp tensors --item-length"
  expect_exit 1 "${F[@]}" validate "$WORK/len$n"
  expect_in "$WORK/out" "truncated_file w [0, 64) __0_0.distcp: chunk 0 [0:64]: its item of $n bytes"
  expect_in "$WORK/out" "cannot hold 64 float32 elements (256 bytes)"
done
finish
