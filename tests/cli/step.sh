#!/usr/bin/env bash
# fpgather step: torch's goldens replayed through files (bitwise: OUT == torch's state, byte for
# byte), DP N == DP 1 byte for byte for both distributed optimizers and FP8 recipes, OUT chained
# back as --params, and the refusals (exit 2 naming the tensor, exit 3 for malformed files).
source "$(dirname "$0")/common.sh"
: "${MAKE_STEP_FILES:?MAKE_STEP_FILES must name the test input generator}"
F=("$FPGATHER" --no-progress)

# Golden cases: 5 steps, OUT -> --params, each OUT identical to the file of torch's state.
for case in adamw_default_n1 adamw_wd_n1003 adamw_nowd_n129 adam_plain_n7 adam_l2_n1003 adam_lowbeta_n129 \
            lion_default_n1003 lion_wd_n129 lion_lowbeta_n7 adamw_wd_n4099; do
  d="$WORK/$case"
  mkdir -p "$d"
  "$MAKE_STEP_FILES" golden "$case" "$d" || { fail "generate $case"; continue; }
  read -r -a flags <"$d/flags"
  in="$d/in.safetensors"
  for t in 1 2 3 4 5; do
    expect_exit 0 "${F[@]}" step "${flags[@]}" --params "$in" --grads "$d/g$t.safetensors" --out "$d/out$t.safetensors"
    cmp -s "$d/out$t.safetensors" "$d/want$t.safetensors" || fail "$case step $t differs from torch"
    in="$d/out$t.safetensors"
  done
  expect_in "$WORK/out" "step 4 -> 5"
done

# DP invariance: every DP size, both distributed optimizers, FP8 recipes; two chained steps.
R="$WORK/random" M="$WORK/mx"
mkdir -p "$R" "$M"
"$MAKE_STEP_FILES" random "$R" || fail "generate random"
"$MAKE_STEP_FILES" random "$M" mx || fail "generate mx"
# step_twice DIR TAG ARGS...: two steps from DIR/in with g1, g2; outputs DIR/TAG.1, DIR/TAG.2.
step_twice() {
  local dir=$1 tag=$2; shift 2
  expect_exit 0 "${F[@]}" step "$@" --params "$dir/in.safetensors" --grads "$dir/g1.safetensors" --out "$dir/$tag.1"
  expect_exit 0 "${F[@]}" step "$@" --params "$dir/$tag.1" --grads "$dir/g2.safetensors" --out "$dir/$tag.2"
}
same_as() {  # same_as DIR TAG REF
  for s in 1 2; do cmp -s "$1/$2.$s" "$1/$3.$s" || fail "$2 step $s differs from $3"; done
}
for opt in adamw lion muon; do
  extra=(--optimizer "$opt" --lr 0.01 --bucket-size 3000)
  [ "$opt" = muon ] && extra+=(--scalar-optimizer lion)
  step_twice "$R" "$opt-dp1" "${extra[@]}"
  for dist in bucketed layerwise; do
    [ "$opt" = muon ] && [ "$dist" = bucketed ] && continue
    for fp8 in none blockwise delayed; do
      for dp in 2 3 4 8; do
        step_twice "$R" "$opt-$dist-$fp8-$dp" "${extra[@]}" --dp "$dp" --dist-opt "$dist" --fp8 "$fp8"
        same_as "$R" "$opt-$dist-$fp8-$dp" "$opt-dp1"
      done
    done
  done
  step_twice "$M" "$opt-dp1" "${extra[@]}"
  step_twice "$M" "$opt-mx-4" "${extra[@]}" --dp 4 --dist-opt layerwise --fp8 mxfp8
  same_as "$M" "$opt-mx-4" "$opt-dp1"
done
"${F[@]}" --json step --optimizer muon --dp 3 --fp8 tensorwise --params "$R/in.safetensors" \
  --grads "$R/g1.safetensors" --out "$WORK/j.safetensors" >"$WORK/j.json" || fail "--json step"
expect_in "$WORK/j.json" '"muon_params": 4'
expect_in "$WORK/j.json" '"fp8_params": 4'
expect_in "$WORK/j.json" '"step_out": 1'
"${F[@]}" inspect "$R/adamw-dp1.2" >"$WORK/listing" || fail "inspect OUT"
expect_in "$WORK/listing" "step: 2"
expect_in "$WORK/listing" "blocks.0.fc1.weight.exp_avg_sq"
# An existing OUT is refused without --force (before anything is read), even the --params file.
cp "$R/in.safetensors" "$WORK/inplace.safetensors"
expect_exit 2 "${F[@]}" step --optimizer adamw --lr 0.01 --bucket-size 3000 --params "$WORK/inplace.safetensors" \
  --grads "$R/g1.safetensors" --out "$WORK/inplace.safetensors"
expect_in "$WORK/err" "fpgather: error: OUT $WORK/inplace.safetensors exists (it is an input): give --force to replace it"
cmp -s "$WORK/inplace.safetensors" "$R/in.safetensors" || fail "a refused step changed its OUT"
expect_exit 2 "${F[@]}" step --optimizer adamw --params "$R/in.safetensors" --grads "$R/g1.safetensors" --out "$R/adamw-dp1.1"
expect_in "$WORK/err" "exists: give --force to replace it"
# With --force OUT may be --params: everything is read before OUT is written
expect_exit 0 "${F[@]}" step --optimizer adamw --lr 0.01 --bucket-size 3000 --params "$WORK/inplace.safetensors" \
  --grads "$R/g1.safetensors" --out "$WORK/inplace.safetensors" --force
cmp -s "$WORK/inplace.safetensors" "$R/adamw-dp1.1" || fail "in-place step differs"

# Refusals: exit 2 naming the tensor, nothing written.
IN="$R/in.safetensors" G1="$R/g1.safetensors" X="$WORK/never.safetensors"
expect_exit 2 "${F[@]}" step --optimizer adamw --params "$IN" --grads "$R/g_missing.safetensors" --out "$X"
expect_in "$WORK/err" "no gradient for parameter 'scale'"
expect_exit 2 "${F[@]}" step --optimizer adamw --params "$IN" --grads "$R/g_shape.safetensors" --out "$X"
expect_in "$WORK/err" "gradient 'blocks.0.norm.weight' has shape [1, 37]"
expect_exit 2 "${F[@]}" step --optimizer adamw --params "$IN" --grads "$WORK/adamw_default_n1/g1.safetensors" --out "$X"
expect_in "$WORK/err" "gradient 'w' matches no parameter"
expect_exit 2 "${F[@]}" step --optimizer lion --params "$R/adamw-dp1.1" --grads "$G1" --out "$X"
expect_in "$WORK/err" "keeps no exp_avg_sq"
expect_exit 2 "${F[@]}" step --optimizer muon --dist-opt bucketed --params "$IN" --grads "$G1" --out "$X"
expect_in "$WORK/err" "layerwise"
expect_exit 2 "${F[@]}" step --optimizer adamw --fp8 mxfp8 --params "$IN" --grads "$G1" --out "$X"
expect_in "$WORK/err" "blocks.0.fc1.weight"
expect_exit 2 "${F[@]}" step --optimizer adamw --betas 0.9 --params "$IN" --grads "$G1" --out "$X"
expect_in "$WORK/err" "--betas"
expect_exit 2 "${F[@]}" step --optimizer adamw --scalar-params '(' --params "$IN" --grads "$G1" --out "$X"
expect_in "$WORK/err" "--scalar-params"
expect_exit 2 "${F[@]}" step --optimizer sgd --params "$IN" --grads "$G1" --out "$X"
expect_exit 2 "${F[@]}" step --params "$IN" --grads "$G1" --out "$X"
[ -e "$X" ] && fail "a refused step wrote $X"
# Malformed files: exit 3 naming the file.
for bad in "$TESTDATA"/safetensors/bad/bad_json.safetensors "$TESTDATA"/safetensors/bad/bad_field_type.safetensors; do
  expect_exit 3 "${F[@]}" step --optimizer adamw --params "$bad" --grads "$G1" --out "$X"
  expect_in "$WORK/err" "$(basename "$bad")"
  expect_exit 3 "${F[@]}" step --optimizer adamw --params "$IN" --grads "$bad" --out "$X"
done
[ -e "$X" ] && fail "malformed input produced $X"
finish
