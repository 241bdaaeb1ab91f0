#!/usr/bin/env bash
# The mpi communicator under mpirun (one rank per process): every collective equals the threads
# backend bit for bit (fpgather_comm_mpi_check, 2 and 3 processes), `train --comm mpi` equals
# `--comm threads` (metrics, saved checkpoints, a resumed run), `step --comm mpi` writes the same file,
# and the refusals (--comm nccl on host pipelines, --comm threads under mpirun, --dp != processes).
# Skipped (77) without mpirun or in a build without MPI.
source "$(dirname "$0")/common.sh"
: "${MPI_CHECK:?MPI_CHECK must name fpgather_comm_mpi_check}"
: "${MAKE_STEP_FILES:?MAKE_STEP_FILES must name the test input generator}"
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
"$MPI_CHECK" --built >/dev/null || { echo "built without MPI: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
F=("$FPGATHER" --no-progress)

for n in 2 3; do
  expect_exit 0 "${MPIRUN[@]}" -n "$n" "$MPI_CHECK"
  expect_in "$WORK/out" "comm_mpi_check: $n ranks, all equal"
done

# Metrics without the timings.
losses() { python3 -c 'import json,sys
for l in open(sys.argv[1]): d=json.loads(l); d.pop("times"); print(json.dumps(d, sort_keys=True))' "$1"; }

T=(train --model tiny --micro-batch 16)
for flags in "--dist-opt bucketed" "--optimizer muon --fp8 tensorwise"; do
  read -r -a fl <<<"$flags"
  rm -rf "$WORK/t" "$WORK/m" "$WORK/m2" "$WORK"/*.jsonl
  expect_exit 0 "${F[@]}" "${T[@]}" "${fl[@]}" --steps 4 --dp 2 --comm threads --save-every 2 \
    --metrics "$WORK/t.jsonl" --save "$WORK/t"
  expect_exit 0 "${MPIRUN[@]}" -n 2 "${F[@]}" "${T[@]}" "${fl[@]}" --steps 4 --dp 2 --comm mpi --save-every 2 \
    --metrics "$WORK/m.jsonl" --save "$WORK/m"
  expect_in "$WORK/out" "trained tiny"
  [ "$(grep -c 'trained tiny' "$WORK/out")" = 1 ] || fail "$flags: more than one process reported"
  [ "$(losses "$WORK/t.jsonl")" = "$(losses "$WORK/m.jsonl")" ] || fail "$flags: mpi metrics differ from threads"
  for s in step-00000002 step-00000004; do
    expect_exit 0 "${F[@]}" diff "$WORK/t/$s" "$WORK/m/$s"
  done
  # resume both from step 2 to step 6
  expect_exit 0 "${F[@]}" "${T[@]}" "${fl[@]}" --steps 6 --dp 2 --comm threads \
    --load "$WORK/t/step-00000002" --metrics "$WORK/tr.jsonl"
  expect_exit 0 "${MPIRUN[@]}" -n 2 "${F[@]}" "${T[@]}" "${fl[@]}" --steps 6 --dp 2 --comm mpi \
    --load "$WORK/m/step-00000002" --metrics "$WORK/mr.jsonl" --save "$WORK/m2"
  expect_in "$WORK/out" "resumed from"
  [ "$(losses "$WORK/tr.jsonl")" = "$(losses "$WORK/mr.jsonl")" ] || fail "$flags: resumed mpi run differs"
done

# step: the same output file, bucketed and layer-wise.
R="$WORK/random"
mkdir -p "$R"
"$MAKE_STEP_FILES" random "$R" || fail "generate random"
for flags in "--optimizer adamw" "--optimizer muon --dist-opt layerwise"; do
  read -r -a fl <<<"$flags"
  expect_exit 0 "${F[@]}" step "${fl[@]}" --dp 3 --params "$R/in.safetensors" --grads "$R/g1.safetensors" \
    --out "$R/threads.safetensors" --force
  expect_exit 0 "${MPIRUN[@]}" -n 3 "${F[@]}" step "${fl[@]}" --dp 3 --comm mpi --params "$R/in.safetensors" \
    --grads "$R/g1.safetensors" --out "$R/mpi.safetensors" --force
  cmp -s "$R/threads.safetensors" "$R/mpi.safetensors" || fail "step $flags: mpi output differs from threads"
done

# Refusals, exit 2 with the reason.
expect_exit 2 "${F[@]}" train --model tiny --steps 1 --comm nccl
expect_in "$WORK/err" "device buffers"
expect_exit 2 "${F[@]}" train --model tiny --steps 1 --comm carrier-pigeon
expect_in "$WORK/err" "unknown communicator"
expect_exit 2 "${MPIRUN[@]}" -n 2 "${F[@]}" train --model tiny --steps 1 --dp 2 --comm threads
expect_in "$WORK/err" "use --comm mpi"
expect_exit 2 "${MPIRUN[@]}" -n 2 "${F[@]}" train --model tiny --steps 1 --dp 3 --comm mpi
expect_in "$WORK/err" "3 ranks requested but 2 processes"
finish
