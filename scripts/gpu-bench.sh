#!/usr/bin/env bash
# GPU benchmarks of issue 6, each section a function; run on the GPU machine after a build:
#
#   bash scripts/gpu-bench.sh BUILD_DIR OUT_DIR [quantize] ...
#
# Each section writes its logs / JSON under OUT_DIR and prints a summary (BENCHMARKS.md, "GPU").
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
BUILD=${1:?build dir}
OUT=${2:?output dir}
shift 2
mkdir -p "$OUT"

# FP8 quantize / batched copy-back (lib/bench/gpu_quantize_bench.cpp) and the PyTorch baselines
# (scripts/bench_torch_quantize.py) on the same shapes, same call. MODEL=base by default.
bench_quantize() {
  local model=${QUANTIZE_MODEL:-base}
  "$BUILD/fpgather" --json bench gpu-quantize --model "$model" --shapes-json "$OUT/quantize-shapes.json" \
    >"$OUT/quantize.json" || return 1
  python3 - "$OUT/quantize.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']}: batch of {r['batch_params']} params, {r['batch_elements']} elements")
for x in r["results"]:
    print(f"{x['recipe']:20s} {x['pass']:10s} {x['median_ms']:9.3f} ms {x['gbps']:8.1f} GB/s  ratio {x['ratio_to_memcpy']:.3f}")
PY
  python3 scripts/bench_torch_quantize.py --shapes "$OUT/quantize-shapes.json" --ours "$OUT/quantize.json" \
    >"$OUT/quantize-torch.json"
  cat "$OUT/quantize-torch.json"
}

for what in "$@"; do
  case "$what" in
    quantize) bench_quantize ;;
    *) echo "unknown section: $what" >&2; exit 2 ;;
  esac
done
