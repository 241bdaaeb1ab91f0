#!/usr/bin/env bash
# Builds fpgather on the GPU machine (Ubuntu 24.04: Catch2 v3, no xxHash headers, no package
# registry), runs the test suite there and the benchmarks, and leaves logs and results in $OUT.
#
#   [TARGETS="t1 t2"] bash scripts/device-run.sh STEP...
#
# Steps: tests (all of ctest), gpu-tests, bench-quantize, bench-io, bench-validate, bench-step,
# bench-reshard, bench-reshard-megatron (`bench reshard --megatron dp tp full`; MEGATRON_LAYERS, default 16),
# bench-export, bench-export-rounds (scripts/bench-export-rounds.sh; ROUNDS), bench-dcp
# (scripts/bench-dcp.sh), megatron-hf (scripts/check-megatron-hf.sh: transformers and Megatron-Core
# load fpgather's Hugging Face exports and imports; HF_PARTS "export", "import" or both),
# bench-megatron-hf (scripts/bench-megatron-hf.sh: convert --to hf and --to megatron against a copy;
# LAYERS_A, LAYERS_B, ROUNDS), bench-ckpt-dcp (scripts/bench_ckpt_dcp.py:
# checkpoint save/load against torch DCP; CKPT_CASES, DCP_THREADS, CKPT_REPS), train-cuda (tiny GPU vs CPU loss
# curves, 1b --dp 2 step time; needs 2 GPUs), gpu-bench-SECTION (a section of scripts/gpu-bench.sh:
# comm, optim, ...), megatron-reshard (scripts/check-megatron-reshard.sh: Megatron-Core loads fpgather's
# reshards at new TP/PP/EP/DP; ONLY, JOBS; the fpgather_cli target is enough), bench-megatron
# (scripts/bench-megatron.sh: RESHARD, ROUNDS, EXPORT_LAYERS, SKIP_INDEX, SKIP_EXPORT),
# gpu-tests-bf16 (the `--compute bf16` GPU tests, then the device network,
# pipeline and train tests of both modes), bench-step-bf16 (scripts/bench-step-vs-torch.sh with
# COMPUTE=fp32,bf16 against torch AMP eager and compile: STEP_PRESETS, default "base 1b"; STEPS, WARMUP,
# RUNS), lt-shapes (each bf16 GEMM shape of a base and a 1b step on cuBLASLt's first eight
# algorithms: time and bytes per second), ncu-step (Nsight Compute's per-kernel times of a 2-step `train --device cuda` run, one step
# broken down by scripts/ncu_step_breakdown.py: NCU_MODEL, default 1b; NCU_COMPUTE, default bf16).
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
echo "built ($SECONDS s)"
# BEFORE_SRC: a tarball of another tree (`git archive -o .carry/before.tar.gz REV`), built too (the CLI
# alone) and timed beside this one by the steps that take BEFORE (bench-megatron, bench-megatron-hf).
if [ -n "${BEFORE_SRC:-}" ]; then
  before=$(mktemp -d)
  tar -xzf "$BEFORE_SRC" -C "$before" &&
    cmake -S "$before" -B "$before/$B" -DCMAKE_BUILD_TYPE=Release "${xx[@]}" ${FPGATHER_CMAKE_ARGS:-} >"$RES/build-before.log" 2>&1 &&
    cmake --build "$before/$B" -j"$jobs" --target fpgather_cli -- -k >>"$RES/build-before.log" 2>&1 ||
    { grep -E "error" -A5 "$RES/build-before.log" | head -40; exit 1; }
  export BEFORE="$before/$B/fpgather"
  echo "built before ($BEFORE_SRC, at $SECONDS s)"
fi
for what in "$@"; do
  echo "== $what (at $SECONDS s)"
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
    bench-reshard-megatron)
      $B/fpgather bench reshard --dir "${BENCH_DIR:-/tmp}" --megatron dp tp full --megatron-layers "${MEGATRON_LAYERS:-16}" |
        tee "$RES/bench-reshard-megatron.txt" ;;
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
    bench-megatron-hf)
      FPGATHER="$PWD/$B/fpgather" LAYERS_A=${LAYERS_A:-8} LAYERS_B=${LAYERS_B:-16} ROUNDS=${ROUNDS:-3} \
        bash scripts/bench-megatron-hf.sh "$(mktemp -u "${BENCH_DIR:-/tmp}/bench-hf-XXXX")" | tee "$RES/bench-megatron-hf.txt" ;;
    megatron-hf)
      bash scripts/check-megatron-hf.sh "$PWD/$B/fpgather" "$RES/megatron-hf" ${HF_PARTS:-} 2>&1 | tee "$RES/megatron-hf.txt" ;;
    megatron-reshard)
      bash scripts/check-megatron-reshard.sh $B/fpgather "$RES/megatron-reshard" 2>&1 | tee "$RES/megatron-reshard.txt" ;;
    bench-megatron)
      FPGATHER=$B/fpgather bash scripts/bench-megatron.sh "$(mktemp -u "${BENCH_DIR:-/tmp}/bench-megatron-XXXX")" 2>&1 |
        tee "$RES/bench-megatron.txt" ;;
    gpu-tests-bf16)
      t0=$SECONDS
      timeout "${BF16_TESTS_TIMEOUT:-120}" $B/tests/fpgather_gpu_tests "[bf16]" >"$RES/gpu-tests-bf16.log" 2>&1
      rc=$?
      echo "[bf16] rc=$rc ($((SECONDS - t0)) s)"; grep -E "^\[bf16\]|^\[device-train\]|passed|failed" "$RES/gpu-tests-bf16.log" | tail -30
      [ $rc -eq 0 ] || grep -v -E "^\[bf16\]|^\[device-train\]" "$RES/gpu-tests-bf16.log" | tail -80
      t0=$SECONDS
      timeout "${BF16_OTHER_TIMEOUT:-240}" $B/tests/fpgather_gpu_tests "[device-network]~[bf16],[device-pipeline]~[bf16],[device-train]~[bf16]" \
        >"$RES/gpu-tests-device.log" 2>&1
      rc=$?
      echo "[device-network],[device-pipeline],[device-train] rc=$rc ($((SECONDS - t0)) s)"
      [ $rc -eq 0 ] && tail -3 "$RES/gpu-tests-device.log" || tail -60 "$RES/gpu-tests-device.log" ;;
    lt-shapes)
      timeout 120 $B/tests/fpgather_gpu_tests "[.lt-shapes]" >"$RES/lt-shapes.log" 2>&1
      echo "rc=$?"; grep -E "^\[lt-shapes\]" "$RES/lt-shapes.log" ;;
    bench-step-bf16)
      STEPS=${STEPS:-30} WARMUP=${WARMUP:-10} RUNS=${RUNS:-amp:eager,amp:compile} COMPUTE=${COMPUTE:-fp32,bf16} \
        PYTHON=${PYTHON:-python3} bash scripts/bench-step-vs-torch.sh $B "$RES/step" ${STEP_PRESETS:-base 1b} 2>&1 |
        tee "$RES/bench-step-bf16.txt" ;;
    ncu-step)
      m=${NCU_MODEL:-1b} c=${NCU_COMPUTE:-bf16}
      if command -v ncu >/dev/null; then
        timeout "${NCU_TIMEOUT:-240}" ncu --metrics gpu__time_duration.sum --csv --log-file "$RES/ncu-$m-$c.csv" \
          $B/fpgather --no-progress train --model "$m" --device cuda --dp 1 --compute "$c" --steps 2 >"$RES/ncu-$m-$c.out" 2>&1
        echo "ncu rc=$?"
        ${PYTHON:-python3} scripts/ncu_step_breakdown.py "$RES/ncu-$m-$c.csv" --json "$RES/ncu-$m-$c.json" 2>&1 |
          tee "$RES/ncu-$m-$c.txt"
      else
        echo "ncu-step: no ncu on this machine"
      fi ;;
    gpu-bench-*)
      bash scripts/gpu-bench.sh $B "$RES/gpu" "${what#gpu-bench-}" 2>&1 | tee "$RES/gpu-bench-${what#gpu-bench-}.txt" ;;
    *) echo "device-run: unknown step $what" >&2 ;;
  esac
done
