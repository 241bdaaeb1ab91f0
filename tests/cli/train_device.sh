#!/usr/bin/env bash
# fpgather train --device: cpu is the default and trains; cuda refuses (exit 2, with the reason) what
# it does not support on any host, and, on a host or build without enough GPUs, says so.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)

expect_exit 0 "${F[@]}" train --device cpu --steps 2 --dp 1
expect_in "$WORK/out" "trained tiny (114,912 params) for 2 steps on dp 1: adamw"
expect_exit 0 "${F[@]}" --json train --device cpu --steps 2 --dp 1
expect_in "$WORK/out" '"device": "cpu"'

expect_exit 2 "${F[@]}" train --device gpu --steps 1
expect_in "$WORK/err" "--device must be cpu or cuda, not 'gpu'"

# --compute bf16 trains on the CPU too (the reference of the GPU's tensor-core mode).
expect_exit 0 "${F[@]}" --json train --device cpu --steps 2 --dp 1 --compute bf16
expect_in "$WORK/out" '"compute": "bf16"'
expect_exit 0 "${F[@]}" train --device cpu --steps 2 --dp 1 --compute bf16
expect_in "$WORK/out" "compute bf16"
expect_exit 2 "${F[@]}" train --compute fp16 --steps 1
expect_in "$WORK/err" "--compute must be fp32 or bf16, not 'fp16'"

# Refused everywhere, GPU or not.
expect_exit 2 "${F[@]}" train --device cuda --comm threads --steps 1
expect_in "$WORK/err" "--device cuda runs its ranks on the nccl communicator, not --comm threads"
expect_exit 2 "${F[@]}" train --device cuda --comm mpi --steps 1
expect_in "$WORK/err" "not --comm mpi"
# Checkpoints are not refused on the device: with a GPU the run trains and saves; without one it
# stops at the GPU count (or the build), not at --save.
"${F[@]}" train --device cuda --steps 1 --save "$WORK/ckpt" >"$WORK/out" 2>"$WORK/err"
rc=$?
if [ "$rc" -eq 0 ]; then
  expect_in "$WORK/out" "saved $WORK/ckpt/step-00000001"
  # A GPU checkpoint is the CPU's format: it validates and a CPU run resumes it. Invariant 4 on the
  # device: 1 step + save + load + 1 step equals 2 steps (diff --atol 0 over every key).
  expect_exit 0 "${F[@]}" validate --data "$WORK/ckpt"
  expect_exit 0 "${F[@]}" train --device cpu --steps 2 --load "$WORK/ckpt"
  expect_in "$WORK/out" "step-00000001 at step 1"
  expect_exit 0 "${F[@]}" train --device cuda --steps 2 --load "$WORK/ckpt" --save "$WORK/ckpt"
  expect_exit 0 "${F[@]}" train --device cuda --steps 2 --save "$WORK/whole"
  expect_exit 0 "${F[@]}" diff --rtol 0 --atol 0 "$WORK/whole" "$WORK/ckpt"
  expect_exit 0 "${F[@]}" validate --data "$WORK/whole"
  # --compute bf16 on the device saves the same format; the CPU resumes it in either mode.
  expect_exit 0 "${F[@]}" train --device cuda --compute bf16 --steps 1 --save "$WORK/bf16"
  expect_exit 0 "${F[@]}" validate --data "$WORK/bf16"
  expect_exit 0 "${F[@]}" train --device cpu --compute bf16 --steps 2 --load "$WORK/bf16"
  expect_exit 0 "${F[@]}" train --device cuda --compute bf16 --steps 2 --load "$WORK/bf16" --save "$WORK/bf16"
else
  [ "$rc" -eq 2 ] || fail "--device cuda --save: exit $rc, want 0 or 2"
  grep -qE -- "built without CUDA and NCCL|--dp [0-9]+ needs [0-9]+ GPUs?, this host has 0" "$WORK/err" ||
    fail "--device cuda --save: unexpected message: $(cat "$WORK/err")"
fi
# Layer-wise Muon with delayed FP8 scaling is not refused either: with a GPU, 1 step + save + load +
# 1 step equals 2 steps (its amax histories and scales are in the checkpoint); without one the run
# stops at the GPU count (or the build).
LW=(train --device cuda --dp 1 --dist-opt layerwise --optimizer muon --fp8 delayed --amax-history 4
    --amax-algo max)
"${F[@]}" "${LW[@]}" --steps 1 --save "$WORK/lw" >"$WORK/out" 2>"$WORK/err"
rc=$?
if [ "$rc" -eq 0 ]; then
  expect_exit 0 "${F[@]}" "${LW[@]}" --steps 2 --load "$WORK/lw" --save "$WORK/lw"
  expect_exit 0 "${F[@]}" "${LW[@]}" --steps 2 --save "$WORK/lw-whole"
  expect_exit 0 "${F[@]}" diff --rtol 0 --atol 0 "$WORK/lw-whole" "$WORK/lw"
else
  [ "$rc" -eq 2 ] || fail "--device cuda layerwise delayed: exit $rc, want 0 or 2"
  grep -qE -- "built without CUDA and NCCL|--dp [0-9]+ needs [0-9]+ GPUs?, this host has 0" "$WORK/err" ||
    fail "--device cuda layerwise delayed: unexpected message: $(cat "$WORK/err")"
fi

# The overlap options are device-only: the CPU pipeline refuses them, naming --device cuda.
for opt in --overlap-grad-reduce --overlap-param-gather; do
  expect_exit 2 "${F[@]}" train --steps 1 --dp 1 "$opt"
  expect_in "$WORK/err" "--overlap-grad-reduce and --overlap-param-gather need --device cuda"
done
expect_exit 0 "${F[@]}" train --help
expect_in "$WORK/out" "--overlap-param-gather"

# More ranks than any host here has GPUs: a build without CUDA says that, one with CUDA counts GPUs.
expect_exit 2 "${F[@]}" train --device cuda --dp 64 --steps 1
grep -qE -- "built without CUDA and NCCL|--dp 64 needs 64 GPUs, this host has [0-9]+" "$WORK/err" ||
  fail "--device cuda --dp 64: unexpected message: $(cat "$WORK/err")"

# The layout does not depend on the device.
expect_exit 0 "${F[@]}" train --device cuda --print-layout --dp 2
expect_in "$WORK/out" "bucketed layout: dp 2"

finish
