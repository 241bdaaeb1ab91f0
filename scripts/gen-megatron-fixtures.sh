#!/usr/bin/env bash
# Regenerates testdata/megatron/ (real Megatron-Core torch_dist checkpoints and their ground truth) on a
# machine with one CUDA GPU and PyTorch. megatron-core and emerging-optimizers come from wheels in
# .whl/ (fetched with `pip download --python-version 3.12 megatron-core==0.19.2
# emerging-optimizers==0.3.0`) so that the machine needs no registry.
# Usage: scripts/gen-megatron-fixtures.sh OUT_DIR [CONFIG …]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gen-megatron-fixtures.sh OUT_DIR [CONFIG ...]}
shift
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
only=()
(($#)) && only=(--only "$@")
python3 testdata/megatron/make_megatron_fixtures.py "$out" "${only[@]}"
