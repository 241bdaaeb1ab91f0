#!/usr/bin/env bash
# fpgather train: the loss falls, --json summary, --metrics lines, --print-layout, every optimizer x
# distributed optimizer x FP8 recipe runs, usage errors exit 2.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)

# json_num FILE KEY: the number after "KEY": in FILE (nlohmann's dump, one key per line).
json_num() { sed -n "s/^ *\"$2\": *\([-0-9.eE+]*\),\{0,1\}$/\1/p" "$1" | head -1; }
# less_than A B: A < B as floating-point numbers.
less_than() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# The defaults (tiny, dp 2, adamw, bucketed): 200 steps end below a third of the initial loss.
expect_exit 0 "${F[@]}" --json train --steps 200 --metrics "$WORK/m.jsonl"
cp "$WORK/out" "$WORK/summary.json"
init=$(json_num "$WORK/summary.json" initial_loss) final=$(json_num "$WORK/summary.json" final_loss)
[ -n "$init" ] && [ -n "$final" ] || fail "no losses in the JSON summary"
less_than "$final" "$(awk -v a="$init" 'BEGIN { print a / 3 }')" || fail "loss $init -> $final did not fall below a third"
for key in '"steps": 200' '"dp": 2' '"params": 114912' '"optimizer": "adamw"' '"dist_opt": "bucketed"' \
           '"step_time_ms"' '"forward_backward_ms"' '"reduce_scatter_ms"' '"optimizer_ms"' '"copy_back_ms"' '"gather_ms"' \
           '"decode_ms"'; do
  expect_in "$WORK/summary.json" "$key"
done
# --metrics: one complete JSON object per step, steps 0..199 in order
[ "$(wc -l <"$WORK/m.jsonl")" -eq 200 ] || fail "metrics has $(wc -l <"$WORK/m.jsonl") lines, want 200"
grep -cvE '^\{"clip_coef":[-0-9.eE+]+,"grad_norm":[-0-9.eE+]+,"loss":[-0-9.eE+]+,"skipped":(true|false),"step":[0-9]+,"times":\{[^{}]*\}\}$' \
  "$WORK/m.jsonl" >"$WORK/badlines"
[ "$(cat "$WORK/badlines")" -eq 0 ] || { fail "malformed metrics lines"; head -2 "$WORK/m.jsonl" >&2; }
sed -n 's/.*"step":\([0-9]*\).*/\1/p' "$WORK/m.jsonl" >"$WORK/steps"
seq 0 199 | cmp -s - "$WORK/steps" || fail "metrics steps are not 0..199"
last_loss=$(sed -n '$s/.*"loss":\([-0-9.eE+]*\).*/\1/p' "$WORK/m.jsonl")
awk -v a="$last_loss" -v b="$final" 'BEGIN { d = a - b; exit !(d < 1e-9 && d > -1e-9) }' || fail "last metrics loss $last_loss != final $final"

# Human summary
expect_exit 0 "${F[@]}" train --steps 5 --log-every 5
expect_in "$WORK/out" "trained tiny (114,912 params) for 5 steps on dp 2: adamw, bucketed, fp8 none"
expect_in "$WORK/out" "forward/backward"
expect_in "$WORK/err" "step 5/5 loss"

# --print-layout: the layout, no training
expect_exit 0 "${F[@]}" train --print-layout --dp 4 --bucket-size 20000
expect_in "$WORK/out" "bucketed layout: dp 4, bucket_size 20000"
expect_in "$WORK/out" "numel_unpadded"
expect_in "$WORK/out" "rank 3 shard"
grep -q "trained" "$WORK/out" && fail "--print-layout trained"
expect_exit 0 "${F[@]}" train --print-layout --optimizer muon --dp 3
expect_in "$WORK/out" "layer-wise layout: dp 3, 8 Muon matrices"
expect_exit 0 "${F[@]}" train --print-layout --fp8 mxfp8
expect_in "$WORK/out" "buffer 1 (U8, F32)"
expect_exit 0 "${F[@]}" --json train --print-layout --keep-fp32 norm
expect_in "$WORK/out" '"kind": "bucketed"'
expect_in "$WORK/out" '"param_dtype": "F32"'

# Every optimizer x distributed optimizer x FP8 recipe runs a few steps
for opt in adamw adam lion muon; do
  for dist in bucketed layerwise; do
    [ "$opt" = muon ] && [ "$dist" = bucketed ] && continue
    for fp8 in none tensorwise delayed blockwise mxfp8; do
      expect_exit 0 "${F[@]}" train --optimizer "$opt" --dist-opt "$dist" --fp8 "$fp8" --steps 3 --dp 3
      expect_in "$WORK/out" "$opt, $dist, fp8 $fp8"
    done
  done
done
expect_exit 0 "${F[@]}" train --optimizer muon --scalar-optimizer lion --steps 3 --accumulation 2 --micro-batch 8 \
  --fp8 blockwise-1x128 --fp8-format e5m2 --keep-fp32 'norm' --bucket-size 5000 --pad-for-nccl --no-nesterov \
  --adjust-lr original --betas 0.9,0.95 --clip-grad 0 --seed 7
expect_in "$WORK/out" "muon, layerwise, fp8 blockwise-1x128 e5m2"
# a spec file of the built-in network
printf '{"name": "mini", "network": {"input": 16, "hidden": 32, "ffn": 64, "layers": 2, "output": 8}}\n' >"$WORK/mini.json"
expect_exit 0 "${F[@]}" train --model "$WORK/mini.json" --steps 3 --fp8 mxfp8
expect_in "$WORK/out" "trained mini"

# Usage errors: exit 2 with the reason
expect_exit 2 "${F[@]}" train --optimizer muon --dist-opt bucketed --steps 1
expect_in "$WORK/err" "--dist-opt layerwise"
printf '{"name": "odd", "network": {"input": 16, "hidden": 48, "ffn": 40, "layers": 1, "output": 8}}\n' >"$WORK/odd.json"
expect_exit 2 "${F[@]}" train --model "$WORK/odd.json" --fp8 mxfp8 --steps 1
expect_in "$WORK/err" "multiple of 32"
expect_exit 2 "${F[@]}" train --model "$WORK/odd.json" --fp8 mxfp8 --print-layout
expect_exit 2 "${F[@]}" train --keep-fp32 '(' --steps 1
expect_in "$WORK/err" "--keep-fp32"
expect_exit 2 "${F[@]}" train --optimizer sgd
expect_in "$WORK/err" "--optimizer"
expect_exit 2 "${F[@]}" train --fp8 cubic
expect_exit 2 "${F[@]}" train --dist-opt zero3
expect_exit 2 "${F[@]}" train --dp 0
expect_exit 2 "${F[@]}" train --betas 0.9
expect_exit 2 "${F[@]}" train --betas 0.9,1.5
expect_exit 2 "${F[@]}" train --lr -1
expect_exit 2 "${F[@]}" train --micro-batch 0
expect_exit 2 "${F[@]}" train --bucket-size 0
expect_exit 2 "${F[@]}" train --model nosuchpreset
expect_exit 2 "${F[@]}" train --steps 1 --metrics "$WORK/m2.jsonl" --fp8 mxfp8 --model "$WORK/odd.json"
[ -e "$WORK/m2.jsonl" ] && fail "a refused run created its metrics file"
expect_exit 3 "${F[@]}" train --steps 1 --metrics "$WORK/no/such/dir/m.jsonl"
expect_in "$WORK/err" "m.jsonl"
finish
