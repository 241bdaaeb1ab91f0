#!/usr/bin/env bash
# Megatron-Core torch_dist checkpoints of model-parallel runs (testdata/megatron/parallel: TP 2, PP 2,
# TP 2 × PP 2, TP 2 × DP 2, EP 2 MoE), in the default dp_reshardable form with one optimizer group per
# model-parallel rank: inspect names the parallel layout and every group's recovered buckets, validate
# --data finds no problem, diff against the same state saved fully_reshardable is equal; a group or a
# parameter taken out is a named problem; reshard refuses what it cannot rewrite yet.
# tests/interop/test_megatron_parallel.py checks every layout and every exported value against the
# ground truth the generator took from Megatron.
source "$(dirname "$0")/common.sh"
: "${MAKE_DCP:?MAKE_DCP must name the fpgather_make_dcp tool}"
M="$TESTDATA/megatron/parallel"
F=("$FPGATHER" --no-progress)

expect_exit 0 "${F[@]}" inspect "$M/tp2pp2-dp1-dp_reshardable/ckpt"
for s in "15 parameters; optimizer state: dp_reshardable, one optimizer group per model-parallel rank" \
         "parallel layout: TP 2 × PP 2 × DP 1 (4 optimizer groups); pipeline stages hold layers [0, 1), [1, 2)" \
         "__3_0.distcp: tp 1, pp 1, dp 0" \
         "optimizer group 'optimizer.distributed.dp_group_idx_1' (tp 1, pp 0): dp 1, 2 buffers" \
         "optimizer group 'optimizer.distributed.dp_group_idx_3' (tp 1, pp 1)" \
         "stored padding: 18 chunks, 576 elements"; do
  expect_in "$WORK/out" "$s"
done
grep -qF "rank 0 shard" "$WORK/out" && fail "inspect printed the groups' full layouts without --layouts"
expect_exit 0 "${F[@]}" inspect --layouts "$M/tp2pp2-dp1-dp_reshardable/ckpt"
[ "$(grep -c "rank 0 shard" "$WORK/out")" = 8 ] || fail "inspect --layouts: not every buffer's shards of the 4 groups"
expect_exit 0 "${F[@]}" inspect "$M/ep2-moe-dp_reshardable/ckpt"
for s in "TP 1 × PP 1 × DP 2, experts EP 2 × expert TP 1 × expert DP 1 (3 optimizer groups)" \
         "__1_0.distcp: tp 0, pp 0, dp 1; expert tp 0, ep 1, pp 0, expert dp 0" \
         "4 experts per MoE layer" \
         "optimizer group 'chained_0.optimizer.distributed.dp_group_idx_0' (tp 0, pp 0): dp 2"; do
  expect_in "$WORK/out" "$s"
done
expect_exit 0 "${F[@]}" inspect "$M/tp2-dp1-fully_reshardable/ckpt"
expect_in "$WORK/out" "model keys stored in TP 2 pieces"
expect_exit 0 "${F[@]}" --json inspect "$M/tp2-dp2-dp_reshardable/ckpt"
expect_in "$WORK/out" '"parallel"'
expect_in "$WORK/out" '"dp_is_smallest"'

# Every fixture validates with its data read; each dp_reshardable one equals its fully_reshardable twin.
for c in tp2-dp1 pp2-dp1 pp2-dp1-3layers tp2pp2-dp1 tp2-dp2 tp2-dp1-buckets tp2-dp1-muon ep2-moe \
         pp2-dp1-tied ep2-moe-dense-first; do
  for form in dp_reshardable fully_reshardable; do
    expect_exit 0 "${F[@]}" validate --data "$M/$c-$form/ckpt"
    expect_in "$WORK/out" "; 0 problems"
  done
  expect_exit 0 "${F[@]}" diff "$M/$c-dp_reshardable/ckpt" "$M/$c-fully_reshardable/ckpt"
  expect_in "$WORK/out" "equal:"
done
expect_exit 0 "${F[@]}" validate "$M/tp2pp2-dp1-dp_reshardable/ckpt"
expect_in "$WORK/out" "TP 2 × PP 2 × DP 1, 4 optimizer groups"
expect_exit 1 "${F[@]}" diff "$M/tp2-dp1-dp_reshardable/ckpt" "$M/tp2-dp1-muon-dp_reshardable/ckpt"
expect_in "$WORK/out" "DIFFERENT"

# A dense group's keys taken out: the groups no longer divide by TP; validate says so, inspect still
# shows the file (and why it recovered no layout).
expect_exit 0 "$MAKE_DCP" copy "$M/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/no-group" \
  --drop optimizer.distributed.dp_group_idx_3.
expect_exit 1 "${F[@]}" validate "$WORK/no-group"
expect_in "$WORK/out" "3 dense optimizer groups do not divide by the tensor-parallel size 2"
expect_in "$WORK/out" "INVALID"
expect_exit 0 "${F[@]}" inspect "$WORK/no-group"
expect_in "$WORK/out" "optimizer layout not recovered"

# A parameter taken out of the model: the group's stored bucket ends disagree with the recomputed layout.
expect_exit 0 "$MAKE_DCP" copy "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/no-param" \
  --drop module.decoder.final_layernorm.weight
for cmd in validate convert; do
  out=()
  [ "$cmd" = convert ] && out=("$WORK/no-param.safetensors" --states)
  expect_exit 1 "${F[@]}" "$cmd" "$WORK/no-param" "${out[@]}"
  cat "$WORK/out" "$WORK/err" >"$WORK/all"
  expect_in "$WORK/all" "group 'optimizer.distributed.dp_group_idx_0': TP rank 0, PP rank 0"
  expect_in "$WORK/all" "stored numel_unpadded 288, but the recomputed layout ends the buffer at 224"
done
[ -e "$WORK/no-param.safetensors" ] && fail "convert left an output behind after a layout problem"

# The expert group's keys taken out: its parameters lie past the last stored bucket.
expect_exit 0 "$MAKE_DCP" copy "$M/ep2-moe-dp_reshardable/ckpt" "$WORK/no-expert-group" \
  --drop chained_1.optimizer.distributed.dp_group_idx_1.
expect_exit 1 "${F[@]}" validate "$WORK/no-expert-group"
expect_in "$WORK/out" "lies past the last stored bucket"

# reshard --dp at TP × PP: every group's buckets laid out again for the new DP size; the output
# validates, the reader recovers the new layout, and it equals Megatron's save per parameter.
for c in "tp2-dp1 2" "tp2pp2-dp1 4 --bucket-size 500" "tp2-dp2 1" "tp2-dp1-buckets 2" "pp2-dp1-tied 2"; do
  read -r name dp opts <<<"$c"
  expect_exit 0 "${F[@]}" reshard "$M/$name-dp_reshardable/ckpt" "$WORK/$name-dp$dp" --dp "$dp" $opts
  expect_in "$WORK/out" "optimizer groups (one per model-parallel rank), each over its local parameters"
  expect_exit 0 "${F[@]}" validate --data "$WORK/$name-dp$dp"
  expect_in "$WORK/out" "× DP $dp, "
  expect_in "$WORK/out" "; 0 problems"
  expect_exit 0 "${F[@]}" diff "$WORK/$name-dp$dp" "$M/$name-fully_reshardable/ckpt"
  expect_in "$WORK/out" "equal:"
done
# A dry run prints the plan and writes nothing; the real run writes what it planned (data, no framing).
expect_exit 0 "${F[@]}" reshard "$M/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/plan" --dp 2 --dry-run
expect_in "$WORK/out" "4 optimizer groups (one per model-parallel rank)"
expect_in "$WORK/out" "plan: reads 438.4 kB, writes"
[ -e "$WORK/plan" ] && fail "a dry run wrote its target"
expect_exit 0 "${F[@]}" --json reshard "$M/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/plan" --dp 2
python3 - "$WORK/out" <<'PY' || fail "reshard --json: the plan's bytes written are not the data written"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["groups"] == 4 and j["plan"]["bytes_written"] == j["bytes_written"], j
PY
# Into dp_reshardable, a MoE model at a DP its EP does not divide is refused, nothing written, the
# reason named (tests/cli/megatron_reshard_ep.sh: what is served).
expect_exit 2 "${F[@]}" reshard "$M/ep2-moe-dp_reshardable/ckpt" "$WORK/r1" --dp 1
expect_in "$WORK/err" "an expert-parallel size 2 needs a data-parallel size that is a multiple of it"
expect_exit 2 "${F[@]}" reshard "$M/tp2-dp1-fully_reshardable/ckpt" "$WORK/r2" --dp 1 --to dp_reshardable \
  --bucket-size none
expect_in "$WORK/err" "model keys are stored in TP 2 pieces"
expect_exit 2 "${F[@]}" reshard "$M/ep2-moe-fully_reshardable/ckpt" "$WORK/r3" --dp 1 --to dp_reshardable \
  --bucket-size none
expect_in "$WORK/err" "holds a MoE model (4 experts per MoE layer)"
for r in r1 r2 r3; do [ -e "$WORK/$r" ] && fail "a refused reshard wrote $r"; done
# Pipeline stages leave no trace in the model space: a PP 2 run's fully_reshardable state rewritten as
# dp_reshardable buckets of one group is a valid checkpoint equal to its source per parameter.
expect_exit 0 "${F[@]}" reshard "$M/pp2-dp1-fully_reshardable/ckpt" "$WORK/pp-as-dp" --dp 1 --to dp_reshardable \
  --bucket-size none
expect_exit 0 "${F[@]}" validate --data "$WORK/pp-as-dp"
expect_in "$WORK/out" "; 0 problems"
expect_exit 0 "${F[@]}" diff "$WORK/pp-as-dp" "$M/pp2-dp1-fully_reshardable/ckpt"
expect_in "$WORK/out" "equal: 60 keys"

# Any parallelism to the model-space form: the output validates, equals per parameter the state
# Megatron itself saved fully_reshardable, and its common state is Megatron's to the byte of its
# rendering (param_groups of each chained optimizer, iteration, content metadata).
for c in tp2-dp1 tp2-dp2 tp2pp2-dp1 pp2-dp1-3layers tp2-dp1-buckets pp2-dp1-tied ep2-moe ep2-moe-dense-first; do
  dp=1
  [ "$c" = tp2-dp2 ] && dp=2
  expect_exit 0 "${F[@]}" reshard "$M/$c-dp_reshardable/ckpt" "$WORK/$c-full" --dp $dp --to fully_reshardable
  expect_in "$WORK/out" "(dp_reshardable) -> $WORK/$c-full (fully_reshardable"
  expect_exit 0 "${F[@]}" validate --data "$WORK/$c-full"
  expect_in "$WORK/out" "; 0 problems"
  expect_exit 0 "${F[@]}" diff "$WORK/$c-full" "$M/$c-fully_reshardable/ckpt"
  expect_in "$WORK/out" "equal:"
  expect_exit 0 "${F[@]}" inspect --key common_state/shard_0_1 "$WORK/$c-full"
  tail -n +2 "$WORK/out" >"$WORK/ours.cs"
  expect_exit 0 "${F[@]}" inspect --key common_state/shard_0_1 "$M/$c-fully_reshardable/ckpt"
  tail -n +2 "$WORK/out" >"$WORK/megatron.cs"
  cmp -s "$WORK/ours.cs" "$WORK/megatron.cs" || fail "$c: the common state differs from Megatron's: $(diff "$WORK/ours.cs" "$WORK/megatron.cs" | head -c 600)"
done

finish
