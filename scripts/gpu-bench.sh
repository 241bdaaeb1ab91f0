#!/usr/bin/env bash
# GPU benchmarks (issue 6): each section runs fpgather's figure and its PyTorch baseline in the same
# call, on the same machine, and leaves JSON in OUT (BENCHMARKS.md, "GPU (issue 6)").
#
#   bash scripts/gpu-bench.sh BUILD_DIR OUT_DIR SECTION...     sections: comm
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}; OUT=${2:?output directory}; shift 2
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"

# NCCL all-gather / reduce-scatter bus bandwidth at a train step's bucket sizes, ours vs torch.distributed.
bench_comm() {
  "$B/fpgather" --json bench comm --models base,1b --dp 2 --iters 20 >"$OUT/comm_ours.json" || return 1
  python3 scripts/bench_torch_comm.py --ours "$OUT/comm_ours.json" --iters 20 --json "$OUT/comm.json"
}

for s in "$@"; do
  case "$s" in
    comm) bench_comm ;;
    *) echo "gpu-bench: unknown section $s" >&2; exit 2 ;;
  esac
done
