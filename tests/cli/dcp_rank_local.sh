#!/usr/bin/env bash
# PyTorch DCP checkpoints saved without collectives (testdata/dcp/make_state_cases.py): the ranks'
# __N.metadata read as one checkpoint by inspect, validate, diff and convert; a missing rank's file
# named; a directory of data files without metadata named as such.
source "$(dirname "$0")/common.sh"
D="$TESTDATA/dcp"
F=(timeout 60 "$FPGATHER" --no-progress)

expect_exit 0 "${F[@]}" inspect --keys "$D/rank_local"
expect_in "$WORK/out" "PyTorch DCP"
expect_in "$WORK/out" "rank-local metadata: 2 files, read as one"
expect_in "$WORK/out" "rank1.counter"
expect_exit 0 "${F[@]}" --json inspect "$D/rank_local"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["metadata_files"] == ["__0.metadata", "__1.metadata"]' \
  "$WORK/out" || fail "inspect --json: metadata_files"
expect_exit 0 "${F[@]}" validate --data "$D/rank_local"
expect_in "$WORK/out" "valid: PyTorch DCP, 4 tensor keys, 5 chunks"
expect_exit 0 "${F[@]}" diff "$D/rank_local" "$D/rank_local"
expect_in "$WORK/out" "equal: 4 keys"
expect_exit 0 "${F[@]}" convert "$D/rank_local" "$WORK/rl.safetensors" --dtype fp32
expect_exit 0 "${F[@]}" diff "$WORK/rl.safetensors" "$D/expected_rank_local.safetensors"
expect_in "$WORK/out" "equal: 4 keys"

# A rank's metadata missing: named, exit 3, for every command.
for c in inspect validate; do
  expect_exit 3 "${F[@]}" $c "$D/rank_local_gap"
  expect_in "$WORK/err" "rank-local metadata (__1.metadata) without __0.metadata"
done
expect_exit 3 "${F[@]}" diff "$D/rank_local_gap" "$D/rank_local"
expect_in "$WORK/err" "without __0.metadata"

# Data files whose save never wrote metadata.
mkdir -p "$WORK/uncommitted"
cp "$D"/rank_local/__*_0.distcp "$WORK/uncommitted/"
expect_exit 3 "${F[@]}" validate "$WORK/uncommitted"
expect_in "$WORK/err" "it holds DCP data files (__0_0.distcp, __1_0.distcp) but no metadata"
# A directory of nothing known still lists what each format looks for.
mkdir -p "$WORK/empty"
expect_exit 3 "${F[@]}" inspect "$WORK/empty"
expect_in "$WORK/err" ".metadata or __<rank>.metadata (PyTorch DCP, Megatron torch_dist)"
finish
