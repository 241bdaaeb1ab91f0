#!/usr/bin/env bash
# convert of checkpoints: export to safetensors (bf16/fp32/fp8 weights, --states, sharding, both
# state layouts, a root holding `latest`), train --init from the export, recompression (values
# preserved: diff equal), refusals. Every checkpoint output passes validate --data.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
for tag in none blockwise mxfp8 delayed; do
  case $tag in
    none) cfg="--fp8 none --ckpt-layout bucket" ;;
    blockwise) cfg="--fp8 blockwise --optimizer muon" ;;
    mxfp8) cfg="--fp8 mxfp8 --optimizer lion --ckpt-layout bucket" ;;
    delayed) cfg="--fp8 delayed --ckpt-layout model" ;;
  esac
  read -r -a c <<<"$cfg"
  ck="$WORK/$tag"
  expect_exit 0 "${F[@]}" train --steps 3 "${c[@]}" --save "$ck"
  # export: the root stands for its latest checkpoint
  expect_exit 0 "${F[@]}" convert "$ck" "$WORK/$tag-bf16.safetensors"
  expect_in "$WORK/out" "from $ck/step-00000003"
  expect_exit 0 "${F[@]}" --json inspect "$WORK/$tag-bf16.safetensors"
  expect_in "$WORK/out" '"blocks.0.fc1.weight"'
  expect_exit 0 "${F[@]}" convert "$ck/step-00000003" "$WORK/$tag-fp32" --dtype fp32 --states --max-shard-size 150KB
  [ -f "$WORK/$tag-fp32/model.safetensors.index.json" ] || fail "$cfg: no index for a sharded export"
  ls "$WORK/$tag-fp32" | grep -c '^model-[0-9]*-of-[0-9]*\.safetensors$' >"$WORK/n"
  [ "$(cat "$WORK/n")" -ge 2 ] || fail "$cfg: expected several shards, got $(cat "$WORK/n")"
  expect_exit 0 "${F[@]}" --json inspect "$WORK/$tag-fp32"
  expect_in "$WORK/out" '"blocks.0.fc1.weight.master"'
  # train --init from the fp32 export: same config, continues training
  expect_exit 0 "${F[@]}" train --steps 2 "${c[@]}" --init "$WORK/$tag-fp32" --save "$WORK/$tag-init"
  expect_exit 0 "${F[@]}" validate --data "$WORK/$tag-init"
  # recompression keeps every value: diff equal, validates
  expect_exit 0 "${F[@]}" convert "$ck" "$WORK/$tag-z3" --compress zstd:3+shuffle
  expect_exit 0 "${F[@]}" validate --data "$WORK/$tag-z3"
  expect_exit 0 "${F[@]}" diff "$ck" "$WORK/$tag-z3"
  expect_in "$WORK/out" "equal"
  expect_exit 0 "${F[@]}" convert "$WORK/$tag-z3" "$WORK/$tag-none" --compress none
  expect_exit 0 "${F[@]}" validate --data "$WORK/$tag-none"
  expect_exit 0 "${F[@]}" diff "$ck" "$WORK/$tag-none"
  expect_in "$WORK/out" "equal"
done
# fp8 export: the checkpoint's own bytes and scales, in convert --fp8's naming; --dequantize reads it
B="$WORK/blockwise"
expect_exit 0 "${F[@]}" convert "$B" "$WORK/q.safetensors" --dtype fp8
expect_exit 0 "${F[@]}" --json inspect "$WORK/q.safetensors"
expect_in "$WORK/out" '"blocks.0.fc1.weight_scale_inv"'
expect_in "$WORK/out" '"F8_E4M3"'
expect_exit 0 "${F[@]}" convert "$WORK/q.safetensors" "$WORK/dq.safetensors" --dequantize --dtype fp32
# ... and --init dequantizes it
expect_exit 0 "${F[@]}" train --steps 1 --fp8 blockwise --optimizer muon --init "$WORK/q.safetensors"
# FP8 re-encode: bf16 -> mxfp8 validates and resumes under the new recipe; back to none equals the
# source (masters and states kept, bf16 weights re-derived from the masters)
expect_exit 0 "${F[@]}" convert "$WORK/none" "$WORK/none-mx" --fp8 mxfp8
expect_in "$WORK/out" "at step 3 with fp8 mxfp8"
expect_exit 0 "${F[@]}" validate --data "$WORK/none-mx"
expect_exit 0 "${F[@]}" train --fp8 mxfp8 --ckpt-layout bucket --load "$WORK/none-mx" --steps 5
expect_in "$WORK/out" "resumed from $WORK/none-mx at step 3"
expect_exit 2 "${F[@]}" train --fp8 none --ckpt-layout bucket --load "$WORK/none-mx" --steps 5
expect_exit 0 "${F[@]}" convert "$WORK/none-mx" "$WORK/none-back" --fp8 none --compress none
expect_exit 0 "${F[@]}" validate --data "$WORK/none-back"
expect_exit 0 "${F[@]}" diff "$WORK/none/step-00000003" "$WORK/none-back"
expect_in "$WORK/out" "equal"
expect_exit 0 "${F[@]}" convert "$WORK/delayed" "$WORK/delayed-bw" --fp8 blockwise-1x128 --fp8-format e5m2
expect_exit 0 "${F[@]}" validate --data "$WORK/delayed-bw"
expect_exit 2 "${F[@]}" convert "$WORK/none" "$WORK/x-ckpt" --fp8 wrong
expect_exit 2 "${F[@]}" convert "$WORK/none" "$WORK/x-ckpt" --fp8 blockwise --no-pow2-scales
expect_exit 2 "${F[@]}" convert "$WORK/none" "$WORK/x-ckpt" --compress none --states
[ ! -e "$WORK/x-ckpt" ] || fail "a refused re-encode left a checkpoint"
# fp32-kept params export as held (F32) in a bf16 export
expect_exit 0 "${F[@]}" train --steps 1 --keep-fp32 norm --fp8 tensorwise --save "$WORK/keep"
expect_exit 0 "${F[@]}" convert "$WORK/keep" "$WORK/keep.safetensors"
expect_exit 0 "${F[@]}" inspect "$WORK/keep.safetensors"
grep -Eq 'final_norm.weight +F32' "$WORK/out" || fail "fp32-kept param not exported as F32"
grep -Eq 'blocks.0.fc1.weight +BF16' "$WORK/out" || fail "FP8 param not exported as BF16"
# refusals
N="$WORK/none"
expect_exit 2 "${F[@]}" convert "$N" "$WORK/x.safetensors" --dtype fp8
expect_in "$WORK/err" "no FP8 params"
expect_exit 2 "${F[@]}" convert "$N" "$WORK/x.safetensors" --dtype fp16
expect_exit 2 "${F[@]}" convert "$N" "$WORK/none-z3" --compress none
[ ! -e "$WORK/x.safetensors" ] || fail "a refused export left a file"
expect_exit 2 "${F[@]}" train --steps 2 --init "$WORK/none-bf16.safetensors" --load "$N"
expect_exit 2 "${F[@]}" train --steps 2 --model small --init "$WORK/none-bf16.safetensors"
expect_in "$WORK/err" "--init: "
finish
