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
  # the run's configuration comes from the checkpoint: none of its flags repeated
  expect_exit 0 "${F[@]}" train --steps 16 --load "$WORK/$tag-part" --save "$WORK/$tag-part" \
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
# flags that repeat the checkpoint's values are accepted
expect_exit 0 "${F[@]}" train --steps 10 --fp8 delayed --optimizer lion --dp 2 --seed 1234 \
  --load "$WORK/__fp8_delayed___optimizer_lion_-part/step-00000008"
expect_in "$WORK/out" "resumed from"
# inspect shows the run's configuration, as train's options
expect_exit 0 "${F[@]}" inspect "$WORK/__fp8_delayed___optimizer_lion_-full"
expect_in "$WORK/out" "next step    16"
expect_in "$WORK/out" "run          --model tiny --optimizer lion --lr 0.0003 --betas 0.9,0.99 --weight-decay 0.1 --clip-grad 1 --dp 2 --dist-opt bucketed --fp8 delayed --fp8-format e4m3 --amax-history 1 --amax-algo most_recent --micro-batch 32 --accumulation 1 --seed 1234"
# every flag that conflicts with the checkpoint is listed at once, checkpoint value against given
# value (exit 2); what follows from a given flag (--eps without lion) is not
expect_exit 2 "${F[@]}" train --steps 20 --dp 3 --optimizer lion --seed 9 --micro-batch 16 --lr 1e-4 \
  --load "$WORK/__fp8_none_-full"
expect_in "$WORK/err" "4 options differ from the checkpoint's run"
expect_in "$WORK/err" "  --optimizer: the checkpoint has adamw, this run lion"
expect_in "$WORK/err" "  --dp: the checkpoint has 2, this run 3"
expect_in "$WORK/err" "  --micro-batch: the checkpoint has 32, this run 16"
expect_in "$WORK/err" "  --seed: the checkpoint has 1234, this run 9"
grep -q -- "--eps\|--lr\|--betas" "$WORK/err" && fail "conflicts list a flag not given or one that may change"
expect_in "$WORK/err" "fpgather reshard $WORK/__fp8_none_-full/step-00000016 $WORK/__fp8_none_-full-step-00000016-dp3 --dp 3"
expect_exit 2 "${F[@]}" train --steps 20 --fp8 mxfp8 --load "$WORK/__fp8_none_-full"
expect_in "$WORK/err" "1 option differs"
expect_in "$WORK/err" "  --fp8: the checkpoint has none, this run mxfp8"
# with --json the error is one JSON document on stderr
expect_exit 2 "${F[@]}" --json train --steps 20 --dp 3 --load "$WORK/__fp8_none_-full"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["exit_code"] == 2 and "--dp: the checkpoint has 2" in d["error"], d' \
  "$WORK/err" || fail "--json error: $(cat "$WORK/err")"
# --lr, --weight-decay and --clip-grad may change on resume; the next checkpoint records the new values
expect_exit 0 "${F[@]}" train --steps 18 --lr 1e-4 --weight-decay 0 --clip-grad 0.5 --load "$WORK/__fp8_none_-full" \
  --save "$WORK/lr-changed"
expect_exit 0 "${F[@]}" inspect "$WORK/lr-changed"
expect_in "$WORK/out" "--lr 0.0001 --betas 0.9,0.999 --eps 1e-08 --weight-decay 0 --clip-grad 0.5"
expect_exit 0 "${F[@]}" train --steps 20 --load "$WORK/lr-changed"
expect_in "$WORK/out" "lr 0.0001"
# retention: --keep 2 leaves the two newest and latest
expect_exit 0 "${F[@]}" train --steps 6 --save "$WORK/keep" --save-every 2 --keep 2 --compress zstd:3+shuffle
[ "$(ls "$WORK/keep" | tr '\n' ' ')" = "latest step-00000004 step-00000006 " ] || fail "--keep 2 left: $(ls "$WORK/keep")"
expect_exit 2 "${F[@]}" train --steps 4 --save-every 2
expect_exit 2 "${F[@]}" train --steps 4 --save "$WORK/x" --ckpt-layout rows
finish
