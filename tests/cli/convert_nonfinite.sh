#!/usr/bin/env bash
# convert --fp8 of a model holding NaN and +-Inf: each such tensor is named on stderr with its
# counts, then the total (and under --json "nonfinite"); --strict refuses it with exit 3 and writes
# nothing. A finite model passes --strict without a word.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)

# nonfinite.safetensors: w F32 [2, 4] = 1 NaN +Inf -Inf 2 3 +Inf 0.5; b BF16 [2, 2] = 1 NaN -Inf 2;
# ok F32 [2, 2] = 1 2 3 4.
hdr='{"w":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[32,40]},"ok":{"dtype":"F32","shape":[2,2],"data_offsets":[40,56]}}'
while [ $((${#hdr} % 8)) -ne 0 ]; do hdr+=' '; done
{
  printf "$(printf '\\x%02x\\x%02x' $((${#hdr} & 255)) $((${#hdr} >> 8)))\\x00\\x00\\x00\\x00\\x00\\x00"
  printf '%s' "$hdr"
  printf '\x00\x00\x80\x3f\x00\x00\xc0\x7f\x00\x00\x80\x7f\x00\x00\x80\xff'  # 1 NaN +Inf -Inf
  printf '\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x7f\x00\x00\x00\x3f'  # 2 3 +Inf 0.5
  printf '\x80\x3f\xc0\x7f\x80\xff\x00\x40'                                  # bf16 1 NaN -Inf 2
  printf '\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40'  # 1 2 3 4
} >"$WORK/nonfinite.safetensors"

W="tensor 'w' holds 4 non-finite values (1 NaN, 2 +Inf, 1 -Inf)"
B="tensor 'b' holds 2 non-finite values (1 NaN, 0 +Inf, 1 -Inf)"
for recipe in tensorwise blockwise blockwise-1x128; do
  expect_exit 0 "${F[@]}" convert "$WORK/nonfinite.safetensors" "$WORK/$recipe.safetensors" --fp8 "$recipe" --include .
  expect_in "$WORK/out" "quantized 3 tensors"
  expect_in "$WORK/err" "fpgather: warning: $W"
  expect_in "$WORK/err" "fpgather: warning: $B"
  expect_in "$WORK/err" "fpgather: warning: 6 non-finite values in 2 tensors"
  if grep -qF "tensor 'ok'" "$WORK/err"; then fail "$recipe: a finite tensor is reported"; fi
done
expect_exit 0 "${F[@]}" --json convert "$WORK/nonfinite.safetensors" "$WORK/json.safetensors" --fp8 tensorwise --include .
expect_in "$WORK/out" '"nonfinite": ['
expect_in "$WORK/out" '"pos_inf": 2'
expect_in "$WORK/out" '"tensor": "b"'

# --strict: refused, nothing written (no output, no temporary file).
mkdir -p "$WORK/strict"
expect_exit 3 "${F[@]}" convert "$WORK/nonfinite.safetensors" "$WORK/strict/fp8.safetensors" --fp8 blockwise --include . --strict
expect_in "$WORK/err" "nonfinite.safetensors: $W, which FP8 cannot hold; --strict refuses to quantize it"
[ -z "$(ls -A "$WORK/strict")" ] || fail "--strict left $(ls -A "$WORK/strict")"
# Only the quantized tensors count: excluded, w and b are copied as they are.
expect_exit 0 "${F[@]}" convert "$WORK/nonfinite.safetensors" "$WORK/strict/ok.safetensors" --fp8 tensorwise --include ok --strict
[ ! -s "$WORK/err" ] || fail "a finite quantization warned: $(cat "$WORK/err")"
expect_exit 0 "${F[@]}" convert "$TESTDATA/models/tiny-llama.safetensors" "$WORK/tiny.safetensors" --fp8 mxfp8 --strict
[ ! -s "$WORK/err" ] || fail "a finite model warned: $(cat "$WORK/err")"
expect_exit 2 "${F[@]}" convert "$WORK/tiny.safetensors" "$WORK/back.safetensors" --dequantize --strict
expect_in "$WORK/err" "--strict belongs to quantizing"
finish
