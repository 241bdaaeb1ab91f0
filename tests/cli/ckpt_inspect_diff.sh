#!/usr/bin/env bash
# fpgather inspect and diff on checkpoints: summary, --keys, --key, --json; diff across DP layouts
# and state layouts (equal), against a perturbed state (different, naming key and range), tolerances.
source "$(dirname "$0")/common.sh"
CK="$TESTDATA/ckpt"
F=("$FPGATHER" --no-progress)
G=$(ls -d "$CK"/golden-v*/ | tail -1)

expect_exit 0 "${F[@]}" inspect "$G"
for s in "fpgather checkpoint" "format       2." "integrity    index checksum verified" "step         7" "model        ckpt-fixture, 2 params" \
         "layout       bucketed, dp 8" "optimizer    adamw, state layout bucket" "fp8 recipe   tensorwise" \
         "compression" "optimizer_state" "master" "fp8_scale"; do
  expect_in "$WORK/out" "$s"
done
expect_exit 0 "${F[@]}" inspect --keys "$CK/valid/run"
expect_in "$WORK/out" "step-00000007: fpgather checkpoint"
expect_in "$WORK/out" "optimizer/buffer0/bucket0/exp_avg_sq"
expect_exit 0 "${F[@]}" inspect --key optimizer/buffer0/bucket0/exp_avg "$G"
expect_in "$WORK/out" "[65, 128)  padding"
expect_in "$WORK/out" "rank-00004.h5"
expect_exit 0 "${F[@]}" --json inspect --keys "$G"
expect_in "$WORK/out" '"compression_ratio"'
expect_in "$WORK/out" '"padding_elements": 63'
expect_exit 2 "${F[@]}" inspect --key nope "$G"
expect_in "$WORK/err" "no key named 'nope'"
# The safetensors path still works.
expect_exit 0 "${F[@]}" inspect "$TESTDATA/models/tiny-llama.safetensors"
expect_in "$WORK/out" "safetensors"

# Same state in DP 2 / DP 4 model layouts, different encodings: equal in model space.
expect_exit 0 "${F[@]}" diff "$CK/valid/dp2-model" "$CK/valid/dp4-model"
expect_in "$WORK/out" "equal:"
# Bucket layouts of DP 8 and DP 2 hold the same keys (numel_unpadded does not depend on DP).
expect_exit 0 "${F[@]}" diff "$G" "$CK/valid/dp2-bucket"
expect_exit 1 "${F[@]}" diff "$CK/valid/dp2-model" "$CK/valid/dp4-model-perturbed"
expect_in "$WORK/out" "optimizer/blocks.0.w/exp_avg: values: 1 of 100 elements differ"
expect_in "$WORK/out" "[42] a="
expect_in "$WORK/out" "DIFFERENT"
expect_exit 0 "${F[@]}" diff --atol 1 "$CK/valid/dp2-model" "$CK/valid/dp4-model-perturbed"
# A model-layout checkpoint against a bucket-layout one: the bucket keys are compared per param.
expect_exit 0 "${F[@]}" --json diff "$CK/valid/dp2-model" "$G"
expect_in "$WORK/out" '"model_space": true'
expect_exit 1 "${F[@]}" diff "$G" "$CK/valid/dp4-model-perturbed"
expect_in "$WORK/out" "optimizer/blocks.0.w/exp_avg: values: 1 of 100 elements differ, in [42, 43)"
# A checkpoint that fails validation is not compared (exit 1, the problems listed)...
expect_exit 1 "${F[@]}" diff "$CK/broken/padding-only-rank-missing" "$G"
expect_in "$WORK/err" "not a valid checkpoint (6 problems); refusing to compare it"
expect_in "$WORK/err" "gap optimizer/buffer0/bucket0/exp_avg [96, 128)"
for name in chunk-as-padding padding-over-data duplicated-chunk edited-document; do
  expect_exit 1 "${F[@]}" diff "$G" "$CK/broken/$name"
  expect_in "$WORK/err" "refusing to compare it"
done
# ... unless asked: values only, a gap where the other has padding holds no data on either side.
expect_exit 0 "${F[@]}" diff --no-validate "$CK/broken/padding-only-rank-missing" "$G"
expect_exit 3 "${F[@]}" diff "$CK/broken/newer-version" "$G"
# The format 1.0 golden checkpoint still reads, and says what it lacks.
G1="$CK/golden-v1.0"
expect_exit 0 "${F[@]}" inspect "$G1"
expect_in "$WORK/out" "integrity    format 1.0: no index checksum, chunk checksums not bound to key and offset"
expect_exit 0 "${F[@]}" --json inspect "$G1"
expect_in "$WORK/out" '"index_checksum": "absent"'
expect_in "$WORK/out" '"chunk_checksums_bound": false'
expect_exit 0 "${F[@]}" diff "$G1" "$G"
# An altered index is shown by inspect, with a warning.
expect_exit 0 "${F[@]}" inspect "$CK/broken/edited-document"
expect_in "$WORK/out" "integrity    INDEX ALTERED: index_checksum records"
expect_in "$WORK/err" "does not match its checksum"
finish
