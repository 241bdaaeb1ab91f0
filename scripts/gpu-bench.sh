#!/usr/bin/env bash
# GPU benchmarks of issue 6, each section a function; run on the GPU machine after a build:
#
#   bash scripts/gpu-bench.sh BUILD_DIR OUT_DIR [optim] ...
#
# Each section writes its logs / JSON under OUT_DIR and prints a summary (BENCHMARKS.md, "GPU").
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
BUILD=${1:?build dir}
OUT=${2:?output dir}
shift 2
mkdir -p "$OUT"

# Fused AdamW/Lion, grad norm and Muon (lib/bench/gpu_optim_bench.cpp) and the PyTorch baselines
# (scripts/bench_torch_optim.py) on the same shapes, same call. OPTIM_MODEL=base by default.
bench_optim() {
  local model=${OPTIM_MODEL:-base}
  "$BUILD/fpgather" --json bench gpu-optim --model "$model" >"$OUT/optim.json" 2>"$OUT/optim.err" \
    || { cat "$OUT/optim.err"; return 1; }
  python3 - "$OUT/optim.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']}, model {r['model']}: {len(r['param_shapes'])} fragments")
for x in r["results"]:
    print(f"{x['what']:10s} {x['shape']:12s} {x['median_ms']:9.3f} ms {x['gbps']:8.1f} GB/s ratio {x['ratio_to_copy']:.3f}"
          f" {x['tflops']:7.1f} TFLOP/s {x['gemm']}")
PY
  python3 scripts/bench_torch_optim.py --from "$OUT/optim.json" >"$OUT/optim-torch.json" 2>"$OUT/optim-torch.err"
  tail -12 "$OUT/optim-torch.err"
}

for what in "$@"; do
  case "$what" in
    optim) bench_optim ;;
    *) echo "unknown section: $what" >&2; exit 2 ;;
  esac
done
