#!/usr/bin/env bash
# Regenerates testdata/megatron/ (real Megatron-Core torch_dist checkpoints and their ground truth) on a
# machine with one CUDA GPU and PyTorch. megatron-core and emerging-optimizers come from wheels in
# .whl/ (fetched with `pip download --no-deps --python-version 3.12 --only-binary=:all: -d .whl
# megatron-core==0.19.2 emerging-optimizers==0.3.0`) so that the machine needs no registry; .whl/extra/
# holds their pure-python/abi3 dependencies (safetensors, psutil, numpy, packaging, absl-py), each
# installed only if the machine's python cannot import it already.
# Usage: scripts/gen-megatron-fixtures.sh OUT_DIR [CONFIG …] [-- GENERATOR_OPTIONS]
#   CONFIG: a DP=1 configuration (dp1-…), a parallel one (tp2-dp1, pp2-dp1, tp2pp2-dp1, tp2-dp2,
#   tp2-dp1-buckets, ep2-moe, pp2-dp1-3layers, tp2-dp1-muon, pp2-dp1-tied,
#   ep2-moe-dense-first) or a fixture folder name
#   (NAME-dp_reshardable / NAME-fully_reshardable); none: all. GENERATOR_OPTIONS e.g. --jobs 4.
# The parallel configurations run 2-4 ranks on the one GPU over gloo (testdata/megatron/gloo_one_gpu.py);
# worker logs land in OUT_DIR/_logs/. testdata/megatron/verify_fixture.py checks a folder afterwards.
# The committed fixtures: the DP=1 ones in testdata/megatron/, the parallel ones in
# testdata/megatron/parallel/ (scripts/gen-megatron-fixtures.sh testdata/megatron/parallel tp2-dp1 …).
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${1:?usage: gen-megatron-fixtures.sh OUT_DIR [CONFIG ...] [-- OPTIONS]}
shift
source scripts/megatron-site.sh
configs=() opts=()
while (($#)); do
  if [ "$1" = -- ]; then shift; opts=("$@"); break; fi
  configs+=("$1"); shift
done
only=()
((${#configs[@]})) && only=(--only "${configs[@]}")
python3 testdata/megatron/make_megatron_fixtures.py "$out" "${only[@]}" "${opts[@]}"
