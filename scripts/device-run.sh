#!/usr/bin/env bash
# Builds fpgather on the GPU machine (Ubuntu 24.04: Catch2 v3, no xxHash headers, no package
# registry), runs the test suite there and the benchmarks, and leaves logs and results in $OUT.
#
#   bash scripts/device-run.sh [tests] [bench-quantize] [bench-io] [bench-validate] [bench-step] [bench-reshard] ...
#
# Carry .carry/ (xxHash headers unpacked from Debian's libxxhash-dev: see BENCHMARKS.md) with the
# call. NCCL_NVLS_ENABLE=0 stays set: NVLink multicast can take a shared host's GPUs down.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/fpgather-device}
mkdir -p "$OUT"
jobs=$(nproc)
xx=()
[ -d .carry/xxhash/usr/include ] && xx=(-DFPGATHER_XXHASH_INCLUDE_DIR="$PWD/.carry/xxhash/usr/include")
{
  nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz" ; free -g | head -2
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
} >"$OUT/machine.txt" 2>&1
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release "${xx[@]}" ${FPGATHER_CMAKE_ARGS:-} >"$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; exit 1; }
cmake --build build-device -j"$jobs" -- -k >>"$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "built"
for what in "$@"; do
  case "$what" in
    tests)
      ctest --test-dir build-device -j"$jobs" >"$OUT/ctest.log" 2>&1
      grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -20 ;;
    bench-quantize)
      build-device/fpgather --json bench quantize --thread-counts 1,2,4,8,"$jobs" >"$OUT/bench-quantize.json"
      build-device/fpgather bench quantize --thread-counts 1,"$jobs" --min-seconds 0.3 | tee "$OUT/bench-quantize.txt" ;;
    bench-io)
      build-device/fpgather bench io --dir "${BENCH_DIR:-/tmp}" --size-gib "${BENCH_IO_GIB:-4}" --ranks 8 | tee "$OUT/bench-io.txt" ;;
    bench-validate)
      build-device/fpgather bench validate --dir "${BENCH_DIR:-/tmp}" --chunks 4000000 | tee "$OUT/bench-validate.txt" ;;
    bench-step)
      build-device/fpgather bench step | tee "$OUT/bench-step.txt" ;;
    bench-reshard)
      build-device/fpgather bench reshard --dir "${BENCH_DIR:-/tmp}" --models small --models base | tee "$OUT/bench-reshard.txt" ;;
    *) echo "device-run: unknown step $what" >&2 ;;
  esac
done
