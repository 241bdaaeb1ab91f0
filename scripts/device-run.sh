#!/usr/bin/env bash
# Builds fpgather on the GPU machine (Ubuntu 24.04: Catch2 v3, no xxHash headers, no package
# registry), runs the test suite there and the benchmarks, and leaves logs and results in $OUT.
#
#   [TARGETS="t1 t2"] bash scripts/device-run.sh STEP...
#
# Steps: tests (all of ctest), gpu-tests, bench-quantize, bench-io, bench-validate, bench-step,
# bench-reshard, bench-export, bench-export-rounds (scripts/bench-export-rounds.sh; ROUNDS), bench-dcp
# (scripts/bench-dcp.sh), bench-ckpt-dcp (scripts/bench_ckpt_dcp.py:
# checkpoint save/load against torch DCP; CKPT_CASES, DCP_THREADS, CKPT_REPS), train-cuda (tiny GPU vs CPU loss
# curves, 1b --dp 2 step time; needs 2 GPUs), gpu-bench-SECTION (a section of scripts/gpu-bench.sh:
# comm, optim, ...), megatron-reshard (scripts/check-megatron-reshard.sh: Megatron-Core loads fpgather's
# reshards at new TP/PP/EP/DP; ONLY, JOBS; the fpgather_cli target is enough), bench-megatron
# (scripts/bench-megatron.sh: RESHARD, ROUNDS, EXPORT_LAYERS, SKIP_INDEX, SKIP_EXPORT).
# BEFORE_SRC=TARBALL also builds another tree's CLI, timed beside this one where a step compares builds.
# Results: $OUT/results.tar.gz (the device tool brings back at most 8 files).
#
# Carry .carry/ (xxHash headers unpacked from Debian's libxxhash-dev: see BENCHMARKS.md) with the
# call. NCCL_NVLS_ENABLE=0 stays set: NVLink multicast can take a shared host's GPUs down.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/fpgather-device}
# The device tool returns at most 8 files: every step logs under $RES, and the end packs $RES into
# $OUT/results.tar.gz; the summary lines also go to stdout.
RES=$(mktemp -d)
trap 'tar -czf "$OUT/results.tar.gz" -C "$RES" . 2>/dev/null' EXIT
mkdir -p "$OUT"
jobs=$(nproc)
B=build-device
xx=()
[ -d .carry/xxhash/usr/include ] && xx=(-DFPGATHER_XXHASH_INCLUDE_DIR="$PWD/.carry/xxhash/usr/include")
{
  nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz" ; free -g | head -2
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
} >"$RES/machine.txt" 2>&1
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release "${xx[@]}" ${FPGATHER_CMAKE_ARGS:-} >"$RES/build.log" 2>&1 \
  || { tail -30 "$RES/build.log"; exit 1; }
# TARGETS (space-separated) builds only those; default: everything.
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build $B -j"$jobs" "${targets[@]}" -- -k >>"$RES/build.log" 2>&1 || { grep -E "error" -A5 "$RES/build.log" | head -60; exit 1; }
echo "built"
# BEFORE_SRC: a tarball of another tree (`git archive -o .carry/before.tar.gz REV`), built too (the CLI
# alone) and timed beside this one by the steps that take BEFORE (bench-megatron).
if [ -n "${BEFORE_SRC:-}" ]; then
  before=$(mktemp -d)
  tar -xzf "$BEFORE_SRC" -C "$before" &&
    cmake -S "$before" -B "$before/$B" -DCMAKE_BUILD_TYPE=Release "${xx[@]}" ${FPGATHER_CMAKE_ARGS:-} >"$RES/build-before.log" 2>&1 &&
    cmake --build "$before/$B" -j"$jobs" --target fpgather_cli -- -k >>"$RES/build-before.log" 2>&1 ||
    { grep -E "error" -A5 "$RES/build-before.log" | head -40; exit 1; }
  export BEFORE="$before/$B/fpgather"
  echo "built before ($BEFORE_SRC)"
fi
for what in "$@"; do
  echo "== $what"
  case "$what" in
    tests)
      timeout "${TESTS_TIMEOUT:-600}" ctest --test-dir $B -j"$jobs" >"$RES/ctest.log" 2>&1
      grep -E "tests passed|Failed|\*\*\*|Skipped|Not Run" "$RES/ctest.log" | tail -20 ;;
    gpu-tests)
      timeout 300 $B/tests/fpgather_gpu_tests >"$RES/gpu-tests.log" 2>&1; echo "rc=$?"; tail -5 "$RES/gpu-tests.log" ;;
    bench-quantize)
      $B/fpgather --json bench quantize --thread-counts "${QUANT_THREADS:-1,2,4,8,$jobs}" >"$RES/bench-quantize.json"
      $B/fpgather bench quantize --thread-counts "${QUANT_THREADS_TEXT:-1,$jobs}" --min-seconds 0.3 | tee "$RES/bench-quantize.txt" ;;
    bench-io)
      $B/fpgather bench io --dir "${BENCH_DIR:-/tmp}" --size-gib "${BENCH_IO_GIB:-4}" --ranks 8 | tee "$RES/bench-io.txt" ;;
    bench-validate)
      $B/fpgather bench validate --dir "${BENCH_DIR:-/tmp}" --chunks 4000000 | tee "$RES/bench-validate.txt" ;;
    bench-step)
      $B/fpgather bench step | tee "$RES/bench-step.txt" ;;
    bench-reshard)
      $B/fpgather bench reshard --dir "${BENCH_DIR:-/tmp}" --models small --models base | tee "$RES/bench-reshard.txt" ;;
    bench-export)
      d=$(mktemp -d "${BENCH_DIR:-/tmp}/export-XXXX")
      $B/fpgather --no-progress train --model base --steps 1 --dp 1 --compress none --save "$d/ckpt" >/dev/null &&
        $B/fpgather bench export "$d/ckpt" --dir "$d" | tee "$RES/bench-export.txt" &&
        $B/fpgather bench export "$d/ckpt" --dir "$d" --to dcp | tee "$RES/bench-export-dcp.txt"
      rm -rf "$d" ;;
    bench-export-rounds)
      bash scripts/bench-export-rounds.sh $B/fpgather "${BENCH_DIR:-/tmp}" | tee "$RES/bench-export-rounds.txt" ;;
    bench-dcp)
      FPGATHER=$B/fpgather PYTHON=${PYTHON:-python3} RESULTS="$RES/bench-dcp.json" \
        bash scripts/bench-dcp.sh "$(mktemp -u "${BENCH_DIR:-/tmp}/bench-dcp-XXXX")" | tee "$RES/bench-dcp.txt" ;;
    bench-ckpt-dcp)
      ${PYTHON:-python3} scripts/bench_ckpt_dcp.py --fpgather $B/fpgather --dir "$(mktemp -u "${BENCH_DIR:-/tmp}/ckpt-dcp-XXXX")" \
        --cases "${CKPT_CASES:-base:1,base:8,1b:1}" --dcp-threads "${DCP_THREADS:-1,8}" --reps "${CKPT_REPS:-1}" \
        --json "$RES/bench-ckpt-dcp.json" 2>&1 | tee "$RES/bench-ckpt-dcp.txt" ;;
    train-cuda)
      for dev in cpu cuda; do
        $B/fpgather --no-progress --json train --device $dev --dp 2 --steps 200 --metrics "$RES/tiny-$dev.jsonl" \
          >"$RES/train-tiny-$dev.json" 2>&1
        echo "tiny $dev: $(grep -E '"(initial_loss|final_loss|step_time_ms)"' "$RES/train-tiny-$dev.json" | tr -d ' \n')"
      done
      $B/fpgather --no-progress --json train --model 1b --device cuda --dp 2 --steps 5 2>&1 | tee "$RES/train-1b-cuda.json" ;;
    megatron-reshard)
      bash scripts/check-megatron-reshard.sh $B/fpgather "$RES/megatron-reshard" 2>&1 | tee "$RES/megatron-reshard.txt" ;;
    bench-megatron)
      FPGATHER=$B/fpgather bash scripts/bench-megatron.sh "$(mktemp -u "${BENCH_DIR:-/tmp}/bench-megatron-XXXX")" 2>&1 |
        tee "$RES/bench-megatron.txt" ;;
    gpu-bench-*)
      bash scripts/gpu-bench.sh $B "$RES/gpu" "${what#gpu-bench-}" 2>&1 | tee "$RES/gpu-bench-${what#gpu-bench-}.txt" ;;
    *) echo "device-run: unknown step $what" >&2 ;;
  esac
done
