#!/usr/bin/env bash
# fpgather train --device: cpu is the default and trains; cuda refuses (exit 2, with the reason) what
# it does not support yet on any host, and, on a host or build without enough GPUs, says so.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)

expect_exit 0 "${F[@]}" train --device cpu --steps 2 --dp 1
expect_in "$WORK/out" "trained tiny (114,912 params) for 2 steps on dp 1: adamw"
expect_exit 0 "${F[@]}" --json train --device cpu --steps 2 --dp 1
expect_in "$WORK/out" '"device": "cpu"'

expect_exit 2 "${F[@]}" train --device gpu --steps 1
expect_in "$WORK/err" "--device must be cpu or cuda, not 'gpu'"

# Refused everywhere, GPU or not.
expect_exit 2 "${F[@]}" train --device cuda --comm threads --steps 1
expect_in "$WORK/err" "--device cuda runs its ranks on the nccl communicator, not --comm threads"
expect_exit 2 "${F[@]}" train --device cuda --comm mpi --steps 1
expect_in "$WORK/err" "not --comm mpi"
for opt in save load init; do
  expect_exit 2 "${F[@]}" train --device cuda --steps 1 "--$opt" "$WORK/ckpt"
  expect_in "$WORK/err" "--device cuda: --$opt is not supported on the GPU yet"
done
expect_exit 2 "${F[@]}" train --device cuda --dist-opt layerwise --steps 1
expect_in "$WORK/err" "--device cuda: --dist-opt layerwise (and so muon) is not supported on the GPU yet"
expect_exit 2 "${F[@]}" train --device cuda --optimizer muon --steps 1
expect_in "$WORK/err" "--dist-opt layerwise (and so muon)"

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
