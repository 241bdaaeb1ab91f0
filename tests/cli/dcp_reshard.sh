#!/usr/bin/env bash
# fpgather reshard on real Megatron-Core torch_dist checkpoints (testdata/megatron): re-bucketing
# (another bucket size, padding, one bucket per buffer), another DP size, dp_reshardable <->
# fully_reshardable; each result validates with --data, recovers the layout asked for, and holds the
# source's state parameter for parameter (diff equal). The loads into Megatron-Core itself are made on
# a GPU machine with testdata/megatron/check_megatron_load.py (BENCHMARKS.md records them).
source "$(dirname "$0")/common.sh"
M="$TESTDATA/megatron"
F=("$FPGATHER" --no-progress)

reshard_ok() {  # SRC DST ARGS...: reshard, then validate --data and diff against SRC
  local src=$1 dst=$2; shift 2
  expect_exit 0 "${F[@]}" reshard "$src" "$dst" "$@"
  expect_exit 0 "${F[@]}" validate --data "$dst"
  expect_in "$WORK/out" "valid: Megatron torch_dist"
  expect_exit 0 "${F[@]}" diff "$src" "$dst"
  expect_in "$WORK/out" "equal: 60 keys"
}

reshard_ok "$M/dp1-one-bucket/ckpt" "$WORK/padded" --dp 1 --bucket-size 6000 --pad-for-nccl
expect_exit 0 "${F[@]}" inspect "$WORK/padded"
expect_in "$WORK/out" "dp_reshardable at dp 1 (the smallest the buckets allow: only the first ranks store any of them), 2 buffers, bucket_size in (4096, 6144], bucket ends padded to lcm(dp, 128, 65536)"
# The same buckets Megatron itself wrote with that configuration.
expect_exit 0 "${F[@]}" inspect --key "optimizer.distributed.dp_group_idx_0.per_bucket_numel_unpadded/shard_0_1" "$WORK/padded"
expect_in "$WORK/out" "8192, 6144, 7168, 3072"

reshard_ok "$M/dp1-buckets-padded/ckpt" "$WORK/one" --dp 1 --bucket-size none --no-pad-for-nccl
expect_exit 0 "${F[@]}" inspect "$WORK/one"
expect_in "$WORK/out" "one bucket per buffer, bucket ends padded to lcm(dp, 128)"

reshard_ok "$M/dp1-one-bucket/ckpt" "$WORK/dp4" --dp 4 --bucket-size 3000
expect_exit 0 "${F[@]}" inspect "$WORK/dp4"
expect_in "$WORK/out" "4 data files"
expect_in "$WORK/out" "dp_reshardable at dp 4"

reshard_ok "$M/dp1-one-bucket/ckpt" "$WORK/fully" --dp 1 --to fully_reshardable
expect_exit 0 "${F[@]}" inspect --key common_state/shard_0_1 "$WORK/fully"
expect_in "$WORK/out" "'distrib_optim_sharding_type': 'fully_reshardable'"
reshard_ok "$WORK/fully" "$WORK/back" --dp 1 --to dp_reshardable --bucket-size 6000 --pad-for-nccl
expect_in "$WORK/out" "equal"
expect_exit 0 "${F[@]}" diff "$WORK/back" "$WORK/padded"

# A DP whose last ranks hold only tail padding: nothing is stored for them (a note says so), and the
# DP is read back from where each rank's shard starts, not from the highest rank file.
expect_exit 0 "${F[@]}" reshard "$M/dp1-one-bucket/ckpt" "$WORK/dp200" --dp 200
expect_in "$WORK/out" "note: from rank 18 on, some ranks' shards of a bucket hold only tail padding"
expect_exit 0 "${F[@]}" validate --data "$WORK/dp200"
expect_in "$WORK/out" "valid: Megatron torch_dist"
expect_exit 0 "${F[@]}" inspect "$WORK/dp200"
expect_in "$WORK/out" "192 data files"
expect_in "$WORK/out" "dp_reshardable at dp 200, 2 buffers"
reshard_ok "$WORK/dp200" "$WORK/dp200-back" --dp 1
expect_exit 0 "${F[@]}" diff "$WORK/dp200-back" "$M/dp1-one-bucket/ckpt"
expect_in "$WORK/out" "equal: 60 keys"
# A shard stored in another rank's file (as a fully parallel save may place it): the DP comes from
# the chunk offsets, not from the file names (rank file 6 of a DP 4 checkpoint).
cp -r "$WORK/dp4" "$WORK/dp4-moved"
python3 - "$WORK/dp4-moved/.metadata" <<'PY'
import sys
p = sys.argv[1]
b = open(p, "rb").read()
assert b.count(b"__2_0.distcp") == 1
open(p, "wb").write(b.replace(b"__2_0.distcp", b"__6_0.distcp"))  # same length: the pickle stays whole
PY
mv "$WORK/dp4-moved/__2_0.distcp" "$WORK/dp4-moved/__6_0.distcp"
expect_exit 0 "${F[@]}" inspect "$WORK/dp4-moved"
expect_in "$WORK/out" "dp_reshardable at dp 4, 2 buffers"
expect_exit 0 "${F[@]}" diff "$WORK/dp4-moved" "$M/dp1-one-bucket/ckpt"
expect_in "$WORK/out" "equal: 60 keys"
# Every bucket inside rank 0's shard: any multiple of the smallest DP the buckets allow reads alike.
reshard_ok "$M/dp1-buckets-padded/ckpt" "$WORK/dp3" --dp 3
expect_exit 0 "${F[@]}" inspect "$WORK/dp3"
expect_in "$WORK/out" "1 data file,"
expect_in "$WORK/out" "dp_reshardable at dp 3 (the smallest the buckets allow"

# Dry run: the plan, nothing written. Refusals: DST exists, a fully_reshardable source without a
# bucket size, a layer-wise optimizer, fpgather-only options.
expect_exit 0 "${F[@]}" reshard "$M/dp1-one-bucket/ckpt" "$WORK/dry" --dp 2 --bucket-size 4000 --dry-run
expect_in "$WORK/out" "reshard plan (dry run)"
[ -e "$WORK/dry" ] && fail "dry run wrote $WORK/dry"
expect_exit 2 "${F[@]}" reshard "$M/dp1-one-bucket/ckpt" "$WORK/padded" --dp 1
expect_exit 2 "${F[@]}" reshard "$M/dp1-fully-reshardable/ckpt" "$WORK/x" --dp 1 --to dp_reshardable
expect_in "$WORK/err" "give --bucket-size"
expect_exit 2 "${F[@]}" reshard "$M/dp1-layerwise-muon/ckpt" "$WORK/x" --dp 2
expect_in "$WORK/err" "layer-wise"
expect_exit 2 "${F[@]}" reshard "$M/dp1-one-bucket/ckpt" "$WORK/x" --dp 2 --ckpt-layout model
[ -e "$WORK/x" ] && fail "a refused reshard left $WORK/x"
finish
