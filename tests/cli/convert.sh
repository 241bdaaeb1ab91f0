#!/usr/bin/env bash
# fpgather convert and inspect on the bundled model: every recipe, dequantize, shards, refusals.
source "$(dirname "$0")/common.sh"
MODEL="$TESTDATA/models/tiny-llama.safetensors"
SHARDED="$TESTDATA/models/tiny-llama-sharded"
F=("$FPGATHER" --no-progress)

# inspect_has FILE REGEX WHAT: the inspect listing of FILE has a line matching REGEX. (No pipe into
# grep -q: with pipefail, grep closing early can fail the pipeline.)
inspect_has() {
  "${F[@]}" inspect "$1" >"$WORK/listing" || { fail "inspect $1"; return; }
  grep -Eq -- "$2" "$WORK/listing" || fail "$3"
}

for recipe in tensorwise blockwise blockwise-1x128 mxfp8; do
  expect_exit 0 "${F[@]}" convert "$MODEL" "$WORK/$recipe.safetensors" --fp8 "$recipe"
  expect_in "$WORK/out" "quantized 17 tensors, copied 6"
  expect_exit 0 "${F[@]}" inspect "$WORK/$recipe.safetensors"
  expect_in "$WORK/out" "fpgather.fp8.recipe: $recipe"
  expect_in "$WORK/out" "model.layers.0.mlp.down_proj.weight_scale_inv"
done
# scale shapes of the 416x160 gate_proj: [4, 2] (128x128), [416, 2] (1x128), [416, 5] (mxfp8), [] (tensorwise)
"${F[@]}" --json inspect "$WORK/blockwise.safetensors" >"$WORK/b.json"
expect_in "$WORK/b.json" '"F8_E4M3"'
inspect_has "$WORK/blockwise.safetensors" 'gate_proj.weight_scale_inv *F32 *\[4, 2\]' "128x128 scale shape"
inspect_has "$WORK/blockwise-1x128.safetensors" 'gate_proj.weight_scale_inv *F32 *\[416, 2\]' "1x128 scale shape"
inspect_has "$WORK/mxfp8.safetensors" 'gate_proj.weight_scale_inv *F8_E8M0 *\[416, 5\]' "mx scale shape"
inspect_has "$WORK/tensorwise.safetensors" 'gate_proj.weight_scale_inv *F32 *\[\]' "tensorwise scale shape"

# e5m2, include/exclude, DeepSeek-style scales
expect_exit 0 "${F[@]}" convert "$MODEL" "$WORK/e5.safetensors" --fp8 blockwise --fp8-format e5m2 \
  --no-pow2-scales --exclude 'lm_head|embed'
expect_in "$WORK/out" "quantized 15 tensors, copied 8"
inspect_has "$WORK/e5.safetensors" 'lm_head.weight *BF16' "--exclude kept lm_head"
expect_exit 0 "${F[@]}" convert "$MODEL" "$WORK/norms.safetensors" --fp8 tensorwise --include 'norm'
expect_in "$WORK/out" "quantized 5 tensors, copied 18"

# dequantize back: scale tensors dropped, bf16 (default) or fp32
expect_exit 0 "${F[@]}" convert "$WORK/mxfp8.safetensors" "$WORK/back.safetensors" --dequantize
expect_in "$WORK/out" "dequantized 17 tensors, copied 6"
"${F[@]}" inspect "$WORK/back.safetensors" >"$WORK/back.txt"
grep -q scale_inv "$WORK/back.txt" && fail "dequantized file still has scales"
grep -q 'gate_proj.weight *BF16' "$WORK/back.txt" || fail "dequantized dtype"
expect_exit 0 "${F[@]}" convert "$WORK/blockwise.safetensors" "$WORK/back32.safetensors" --dequantize --dtype fp32
inspect_has "$WORK/back32.safetensors" 'gate_proj.weight *F32' "--dtype fp32"

# sharded in, sharded out (index + shards of the same names), and consolidation into one file
expect_exit 0 "${F[@]}" convert "$SHARDED" "$WORK/sh" --fp8 mxfp8
for f in model.safetensors.index.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
  [ -f "$WORK/sh/$f" ] || fail "sharded output lacks $f"
done
expect_in "$WORK/sh/model.safetensors.index.json" '"lm_head.weight_scale_inv"'
expect_exit 0 "${F[@]}" inspect "$WORK/sh"
expect_in "$WORK/out" "2 files, 40 tensors"
expect_exit 0 "${F[@]}" convert "$SHARDED/model.safetensors.index.json" "$WORK/one.safetensors" --fp8 mxfp8
inspect_has "$WORK/one.safetensors" 'model.layers.1.mlp.up_proj.weight_scale_inv *F8_E8M0' "consolidated file"

# refusals: exit 2, nothing written
mkdir -p "$WORK/bad"
header='{"w":{"dtype":"F32","shape":[2,100],"data_offsets":[0,800]}}'
while [ $(( ${#header} % 8 )) -ne 0 ]; do header="$header "; done
{ printf "$(printf '\\x%02x' $(( ${#header} )) 0 0 0 0 0 0 0)"; printf '%s' "$header"; head -c 800 /dev/zero; } >"$WORK/bad/k100.safetensors"
expect_exit 0 "${F[@]}" inspect "$WORK/bad/k100.safetensors"
expect_exit 2 "${F[@]}" convert "$WORK/bad/k100.safetensors" "$WORK/bad/out.safetensors" --fp8 mxfp8
expect_in "$WORK/err" "'w'"
expect_in "$WORK/err" "multiple of 32"
[ "$(ls -A "$WORK/bad" | grep -vc '^k100.safetensors$')" -eq 0 ] || fail "a refused convert left files: $(ls -A "$WORK/bad")"
expect_exit 2 "${F[@]}" convert "$MODEL" "$WORK/x.safetensors" --fp8 cubic
expect_exit 2 "${F[@]}" convert "$MODEL" "$WORK/x.safetensors" --fp8 mxfp8 --dequantize
expect_exit 2 "${F[@]}" convert "$MODEL" "$WORK/x.safetensors"
expect_exit 2 "${F[@]}" convert "$MODEL" "$WORK/x.safetensors" --fp8 tensorwise --include '('
expect_in "$WORK/err" "--include"
expect_exit 2 "${F[@]}" convert "$WORK/mxfp8.safetensors" "$WORK/x.safetensors" --fp8 mxfp8
expect_in "$WORK/err" "already"
expect_exit 2 "${F[@]}" convert "$MODEL" "$MODEL" --fp8 tensorwise
[ -e "$WORK/x.safetensors" ] && fail "a refused convert wrote x.safetensors"

# malformed input: exit 3, the message names the file
for bad in "$TESTDATA"/safetensors/bad/*.safetensors; do
  expect_exit 3 "${F[@]}" convert "$bad" "$WORK/y.safetensors" --fp8 tensorwise
  expect_in "$WORK/err" "$(basename "$bad")"
  expect_exit 3 "${F[@]}" inspect "$bad"
done
[ -e "$WORK/y.safetensors" ] && fail "malformed input produced output"
finish
