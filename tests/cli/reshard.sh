#!/usr/bin/env bash
# reshard: the README example (train at DP 4, reshard to DP 2, resume, diff) runs exactly as written;
# resharded to DP 1 x 4 the resumed run ends bitwise where the DP-4 run does (lib/ARCHITECTURE.md invariants 3
# and 5); other layouts; a real difference; --dry-run; refusals with their exit codes.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
cd "$WORK" || exit 1
# The README example.
expect_exit 0 "${F[@]}" train --dp 4 --steps 16 --save-every 8 --save run4
expect_exit 0 "${F[@]}" reshard run4/step-00000008 run2 --dp 2
expect_in "$WORK/out" "resume with: fpgather train --load run2"
# the line pasted as it is: the run's DP size, accumulation and layout come from run2
resume=$(sed -n 's/^resume with: //p' "$WORK/out")
mkdir -p bin && ln -sf "$FPGATHER" bin/fpgather
expect_exit 0 env PATH="$WORK/bin:$PATH" bash -c "$resume --no-progress"
expect_in "$WORK/out" "resumed from run2 at step 8"
expect_in "$WORK/out" "on dp 2"
expect_exit 0 "${F[@]}" train --steps 16 --load run2 --save run2-resumed
expect_in "$WORK/out" "resumed from run2 at step 8"
expect_exit 0 "${F[@]}" diff run4/step-00000008 run2
expect_in "$WORK/out" "equal"
expect_exit 0 "${F[@]}" diff --rtol 1e-3 --atol 1e-9 run4 run2-resumed
expect_in "$WORK/out" "equal"
# DP 1 x 4 sums the micro-batch gradients in DP 4's order: bitwise the uninterrupted run.
expect_exit 0 "${F[@]}" reshard run4/step-00000008 run1 --dp 1
expect_exit 0 "${F[@]}" train --dp 1 --accumulation 4 --steps 16 --load run1 --save run1-resumed
expect_exit 0 "${F[@]}" diff run4 run1-resumed
expect_in "$WORK/out" "equal: 60 keys"
expect_exit 0 "${F[@]}" validate --data run2
# Another state layout, bucket size and distributed optimizer: still the same values.
expect_exit 0 "${F[@]}" reshard run4/step-00000008 run3 --dp 3 --ckpt-layout bucket --bucket-size 20000 \
  --dist-opt layerwise --accumulation 1 --compress none
expect_exit 0 "${F[@]}" validate --data run3
expect_exit 0 "${F[@]}" diff run3 run2
expect_in "$WORK/out" "equal"
# A real difference is reported with its key and range.
expect_exit 0 "${F[@]}" train --dp 4 --steps 9 --save other4 --ckpt-layout bucket
expect_exit 1 "${F[@]}" diff other4 run2
expect_in "$WORK/out" "optimizer/blocks.0.fc1.weight/exp_avg: values"
expect_in "$WORK/out" "elements differ, in ["
# --dry-run writes nothing and prints the plan.
expect_exit 0 "${F[@]}" reshard run4 plan8 --dp 8 --accumulation 1 --dry-run
expect_in "$WORK/out" "peak memory estimate"
expect_in "$WORK/out" "rank 7"
[ -e plan8 ] && fail "--dry-run wrote plan8"
expect_exit 0 "${F[@]}" --json reshard run4 plan8 --dp 8 --accumulation 1 --dry-run
expect_in "$WORK/out" '"bytes_written"'
# Refusals: Muon cannot go bucketed (2); DST exists (2); the global batch does not split (2);
# an invalid source (3); a directory that is not a checkpoint (3).
expect_exit 0 "${F[@]}" train --dp 2 --steps 2 --optimizer muon --save muon2
expect_exit 2 "${F[@]}" reshard muon2 muon-b --dp 2 --dist-opt bucketed
expect_in "$WORK/err" "Muon"
expect_exit 2 "${F[@]}" reshard run4 run2 --dp 2
expect_in "$WORK/err" "already exists"
expect_exit 2 "${F[@]}" reshard run4 run5 --dp 5
expect_in "$WORK/err" "--accumulation"
cp -r run4/step-00000016 broken
rm broken/rank-00002.h5
expect_exit 1 "${F[@]}" reshard broken fixed --dp 2
expect_in "$WORK/err" "not a valid checkpoint"
[ -e fixed ] && fail "a refused reshard left fixed behind"
mkdir empty
expect_exit 3 "${F[@]}" reshard empty x --dp 2
# Loading at another DP names the reshard command to run.
expect_exit 2 "${F[@]}" train --dp 2 --steps 20 --load run4
expect_in "$WORK/err" "fpgather reshard run4/step-00000016 run4-step-00000016-dp2 --dp 2 --accumulation 1"
finish
