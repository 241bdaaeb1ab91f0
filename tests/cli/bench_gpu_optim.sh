#!/usr/bin/env bash
# fpgather bench gpu-optim: argument refusals (exit 2 naming the problem) everywhere; on a machine with
# a GPU a short run that prints every row, elsewhere exit 2 saying why it cannot run.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)

expect_exit 2 "${F[@]}" bench gpu-optim --muon-shapes 64x
expect_in "$WORK/err" "is not ROWSxCOLS"
expect_exit 2 "${F[@]}" bench gpu-optim --muon-shapes 0x8
expect_in "$WORK/err" "'0x8' is not ROWSxCOLS"
expect_exit 2 "${F[@]}" bench gpu-optim --model no-such-preset
expect_in "$WORK/err" "no-such-preset"

"${F[@]}" --json bench gpu-optim --model tiny --muon-shapes 64x32,40x96 --iters 2 --warmup 1 >"$WORK/out" 2>"$WORK/err"
rc=$?
if [ "$rc" -eq 0 ]; then
  for what in '"copy"' '"adamw"' '"lion"' '"grad-norm"' '"grad-norm-div"' '"grad-max"' '"grad-sq"' '"64x32"' '"40x96"' '"model"'; do expect_in "$WORK/out" "$what"; done
elif [ "$rc" -eq 2 ]; then
  grep -qE "no CUDA device|built without CUDA" "$WORK/err" || fail "exit 2 without saying why: $(head -1 "$WORK/err")"
else
  fail "bench gpu-optim exit $rc"
fi
finish
