#!/usr/bin/env bash
# Real Megatron-Core torch_dist checkpoints (testdata/megatron): inspect with the recovered optimizer
# layout, --keys, --key; diff across optimizer layouts (equal) and optimizers (different); export
# per parameter to safetensors, bitwise equal to the ground truth the generator took from Megatron.
source "$(dirname "$0")/common.sh"
M="$TESTDATA/megatron"
F=("$FPGATHER" --no-progress)

expect_exit 0 "${F[@]}" inspect "$M/dp1-buckets-padded/ckpt"
for s in "Megatron torch_dist (backend torch_dist v1)" "15 parameters" "dp_reshardable at dp 1 (the smallest the buckets allow: only the first ranks store any of them), 2 buffers" \
         "bucket ends padded to lcm(dp, 128, 65536)" "stored padding: 12 chunks, 384 elements" \
         "bucket 3:" "decoder.layers.0.self_attention.linear_proj.weight"; do
  expect_in "$WORK/out" "$s"
done
expect_exit 0 "${F[@]}" inspect "$M/dp1-one-bucket/ckpt"
expect_in "$WORK/out" "dp_reshardable at dp 1, 2 buffers, one bucket per buffer, bucket ends padded to lcm(dp, 128)"
expect_exit 0 "${F[@]}" inspect --keys "$M/dp1-layerwise-muon/ckpt"
expect_in "$WORK/out" "chained_0.optimizer.state.momentum_buffer.module.decoder.layers.mlp.linear_fc1.weight"
expect_in "$WORK/out" "optimizer state: model space"
expect_exit 0 "${F[@]}" inspect --key "optimizer.distributed.dp_group_idx_0.per_bucket_numel_unpadded/shard_0_1" \
  "$M/dp1-buckets-padded/ckpt"
expect_in "$WORK/out" "8192, 6144, 7168, 3072"
expect_exit 0 "${F[@]}" --json inspect "$M/dp1-fully-reshardable/ckpt"
expect_in "$WORK/out" '"form": "model space"'
expect_exit 2 "${F[@]}" inspect --key nope "$M/dp1-one-bucket/ckpt"

# One training run saved three ways: equal per parameter; Muon's run differs.
expect_exit 0 "${F[@]}" diff "$M/dp1-one-bucket/ckpt" "$M/dp1-buckets-padded/ckpt"
expect_in "$WORK/out" "equal: 60 keys"
expect_exit 0 "${F[@]}" diff "$M/dp1-buckets-padded/ckpt" "$M/dp1-fully-reshardable/ckpt"
expect_exit 1 "${F[@]}" diff "$M/dp1-one-bucket/ckpt" "$M/dp1-layerwise-muon/ckpt"
expect_in "$WORK/out" "decoder.layers.0.mlp.linear_fc1.weight.momentum_buffer: only in B"
expect_in "$WORK/out" "DIFFERENT"

# Export (tests/interop/test_dcp_export.py compares the values with the ground truth).
for c in dp1-one-bucket dp1-buckets-padded dp1-fully-reshardable dp1-layerwise-muon; do
  expect_exit 0 "${F[@]}" convert "$M/$c/ckpt" "$WORK/$c.safetensors" --states --dtype fp32
  expect_in "$WORK/out" "exported"
done
expect_exit 2 "${F[@]}" convert "$M/dp1-one-bucket/ckpt" "$WORK/x.safetensors" --fp8 tensorwise
expect_in "$WORK/err" "exports to safetensors"
finish
