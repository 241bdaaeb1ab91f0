#!/usr/bin/env bash
# reshard --tp/--pp of Megatron-Core dp_reshardable checkpoints (testdata/megatron/parallel, written by
# Megatron-Core itself): the output validates with its data read, the reader recovers Megatron's
# buffer layout for every new group from the buckets written, and every parameter (weight, master,
# both Adam moments) equals the same state saved fully_reshardable. Resharding back to the source's
# TP x PP rebuilds Megatron's own layout: the same groups with the same bucket sizes and stored
# chunks as the checkpoint Megatron wrote, and rewriting one fixture at another fixture's sizes (the
# same model) gives the groups Megatron laid out there. What the rewrite does not serve is refused,
# nothing written.
source "$(dirname "$0")/common.sh"
M="$TESTDATA/megatron/parallel"
F=("$FPGATHER" --no-progress)

# The fixtures' runs: one bucket per buffer (no overlap_grad_reduce), tp2-dp1-buckets bucket_size
# 1000; their buckets give only a range of sizes, which at other local shapes can cut differently, so
# the run's setting is given (without it, refused: below).
# source, target options, its fully_reshardable twin, the parallel layout validate names.
for c in "tp2-dp1|--tp 1 --dp 1 --bucket-size none|tp2-dp1|TP 1 × PP 1 × DP 1" \
         "tp2-dp2|--tp 1 --dp 2 --bucket-size none|tp2-dp2|TP 1 × PP 1 × DP 2" \
         "tp2-dp1-buckets|--tp 1 --dp 2 --bucket-size 1000|tp2-dp1-buckets|TP 1 × PP 1 × DP 2" \
         "pp2-dp1|--tp 2 --dp 1|pp2-dp1|TP 2 × PP 2 × DP 1" \
         "pp2-dp1|--pp 1 --dp 2 --bucket-size none|pp2-dp1|TP 1 × PP 1 × DP 2" \
         "pp2-dp1-tied|--pp 1 --dp 1 --bucket-size none|pp2-dp1-tied|TP 1 × PP 1 × DP 1" \
         "pp2-dp1-3layers|--pp 3 --dp 1|pp2-dp1-3layers|TP 1 × PP 3 × DP 1" \
         "tp2pp2-dp1|--tp 1 --pp 1 --dp 1 --bucket-size none|tp2pp2-dp1|TP 1 × PP 1 × DP 1" \
         "tp2pp2-dp1|--tp 1 --pp 2 --dp 2 --bucket-size none|tp2pp2-dp1|TP 1 × PP 2 × DP 2"; do
  IFS='|' read -r name opts twin layout <<<"$c"
  out="$WORK/$name$(echo "$opts" | tr -d ' -')"
  expect_exit 0 "${F[@]}" reshard "$M/$name-dp_reshardable/ckpt" "$out" $opts
  expect_in "$WORK/out" "(dp_reshardable) -> $out (dp_reshardable, "
  expect_exit 0 "${F[@]}" validate --data "$out"
  expect_in "$WORK/out" "; 0 problems"
  case $layout in "TP 1 × PP 1 "*) ;; *) expect_in "$WORK/out" "$layout" ;; esac  # one group: no layout line
  expect_exit 0 "${F[@]}" diff "$out" "$M/$twin-fully_reshardable/ckpt"
  expect_in "$WORK/out" "equal:"
done

# There and back: Megatron's own layout of every group, bucket for bucket.
for c in "tp2-dp1|--tp 1|--tp 2|none" "tp2pp2-dp1|--tp 1 --pp 1|--tp 2 --pp 2|none" "pp2-dp1-tied|--pp 1|--pp 2|none" \
         "tp2-dp1-buckets|--tp 1|--tp 2|1000"; do
  IFS='|' read -r name there back bucket <<<"$c"
  expect_exit 0 "${F[@]}" reshard "$M/$name-dp_reshardable/ckpt" "$WORK/$name-there" $there --dp 1 --bucket-size $bucket
  expect_exit 0 "${F[@]}" reshard "$WORK/$name-there" "$WORK/$name-back" $back --dp 1 --bucket-size $bucket
  optimizer_groups "$M/$name-dp_reshardable/ckpt" >"$WORK/$name-groups-src" || fail "$name: inspect of the source"
  optimizer_groups "$WORK/$name-back" >"$WORK/$name-groups-back" || fail "$name: inspect of the round trip"
  [ -s "$WORK/$name-groups-src" ] || fail "$name: inspect --json reported no optimizer groups"
  cmp -s "$WORK/$name-groups-src" "$WORK/$name-groups-back" ||
    fail "$name: $there then $back does not give back Megatron's groups: $(diff "$WORK/$name-groups-src" "$WORK/$name-groups-back" | head -5)"
  expect_exit 0 "${F[@]}" diff "$WORK/$name-back" "$M/$name-dp_reshardable/ckpt"
  expect_in "$WORK/out" "equal:"
done

# At new sizes: the fixtures are one model saved by Megatron at TP 2 x PP 2, TP 2, and PP 2, so each
# one rewritten at another's sizes must have the groups Megatron itself laid out there.
for c in "tp2pp2-dp1|--pp 1|tp2-dp1" "tp2pp2-dp1|--tp 1|pp2-dp1" "pp2-dp1|--tp 2|tp2pp2-dp1"; do
  IFS='|' read -r name opts other <<<"$c"
  expect_exit 0 "${F[@]}" reshard "$M/$name-dp_reshardable/ckpt" "$WORK/$name-as-$other" $opts --dp 1 --bucket-size none
  optimizer_groups "$M/$other-dp_reshardable/ckpt" >"$WORK/g-megatron" || fail "inspect of $other"
  optimizer_groups "$WORK/$name-as-$other" >"$WORK/g-ours" || fail "inspect of $name $opts"
  cmp -s "$WORK/g-megatron" "$WORK/g-ours" ||
    fail "$name $opts: not the groups Megatron laid out at $other's sizes: $(diff "$WORK/g-megatron" "$WORK/g-ours" | head -4)"
done

# Uneven stages as Megatron's num_layers_in_first/last_pipeline_stage: 3 layers saved as 2 + 1, rewritten
# 1 + 2 (first or last given alike), valid and equal; back to 2 + 1, Megatron's own groups.
for opts in "--first-stage-layers 1" "--last-stage-layers 2"; do
  out="$WORK/uneven$(echo "$opts" | tr -d ' -')"
  expect_exit 0 "${F[@]}" reshard "$M/pp2-dp1-3layers-dp_reshardable/ckpt" "$out" --pp 2 --dp 1 $opts
  expect_exit 0 "${F[@]}" validate --data "$out"
  expect_in "$WORK/out" "; 0 problems"
  expect_exit 0 "${F[@]}" diff "$out" "$M/pp2-dp1-3layers-fully_reshardable/ckpt"
  expect_in "$WORK/out" "equal:"
done
optimizer_groups "$WORK/unevenfirststagelayers1" >"$WORK/g-1-2" || fail "inspect of the 1 + 2 stages"
optimizer_groups "$WORK/unevenlaststagelayers2" >"$WORK/g-1-2b" || fail "inspect of the 1 + 2 stages (last given)"
cmp -s "$WORK/g-1-2" "$WORK/g-1-2b" || fail "--first-stage-layers 1 and --last-stage-layers 2 differ at 3 layers"
optimizer_groups "$M/pp2-dp1-3layers-dp_reshardable/ckpt" >"$WORK/g-2-1" || fail "inspect of the source"
cmp -s "$WORK/g-1-2" "$WORK/g-2-1" && fail "1 + 2 stages laid out as 2 + 1"
expect_exit 0 "${F[@]}" reshard "$WORK/unevenfirststagelayers1" "$WORK/uneven-back" --pp 2 --dp 1 --first-stage-layers 2
optimizer_groups "$WORK/uneven-back" >"$WORK/g-back" || fail "inspect of the uneven round trip"
cmp -s "$WORK/g-2-1" "$WORK/g-back" || fail "1 + 2 back to 2 + 1 is not Megatron's layout: $(diff "$WORK/g-2-1" "$WORK/g-back" | head -4)"
expect_exit 2 "${F[@]}" reshard "$M/pp2-dp1-3layers-dp_reshardable/ckpt" "$WORK/r9" --pp 2 --dp 1 --first-stage-layers 1 \
  --last-stage-layers 1
expect_in "$WORK/err" "the first and last pipeline stages' 1 + 1 layers are not the model's 3"
expect_exit 2 "${F[@]}" reshard "$M/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/r10" --pp 1 --dp 1 --first-stage-layers 1
expect_in "$WORK/err" "are for several pipeline stages, not --pp 1"
for r in r9 r10; do [ -e "$WORK/$r" ] && fail "a refused reshard wrote $r"; done

# Megatron-LM's saved args take the target's sizes (its load requires the checkpoint's TP x PP to be the
# run's for a dp_reshardable optimizer state) and no_save_rng (the per-rank RNG states are the old
# layout's: the run seeds afresh); the reader checks the rewritten args against the layout written.
expect_exit 0 "${F[@]}" reshard "$M/hf-llama-dp_reshardable/ckpt" "$WORK/llama-tp2" --tp 2 --dp 1 --bucket-size none
expect_exit 0 "${F[@]}" validate --data "$WORK/llama-tp2"
expect_in "$WORK/out" "TP 2 × PP 1 × DP 1"
expect_in "$WORK/out" "; 0 problems"
expect_exit 0 "${F[@]}" diff "$WORK/llama-tp2" "$M/hf-llama-dp_reshardable/ckpt"
expect_in "$WORK/out" "equal:"
"${F[@]}" --json inspect "$WORK/llama-tp2" >"$WORK/llama.json" || fail "inspect of the rewritten args"
python3 - "$WORK/llama.json" <<'PY' || fail "the saved args do not name the target's sizes"
import json, sys
def find(o):
    if isinstance(o, dict):
        if isinstance(o.get("args"), dict):
            return o["args"]
        for v in o.values():
            r = find(v)
            if r is not None:
                return r
a = find(json.load(open(sys.argv[1])))
assert a["tensor_model_parallel_size"] == 2 and a["pipeline_model_parallel_size"] == 1, a
assert a["no_save_rng"] is True and a["num_layers"] == 2, a
PY

# A dry run prints the plan of every new group and writes nothing.
expect_exit 0 "${F[@]}" reshard "$M/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/plan" --tp 1 --pp 1 --dp 2 --dry-run \
  --bucket-size none
expect_in "$WORK/out" "reshard plan (dry run):"
expect_in "$WORK/out" "(dp_reshardable, tp 1, pp 1, dp 2)"
expect_in "$WORK/out" "plan: reads"
[ -e "$WORK/plan" ] && fail "a dry run wrote its target"
expect_exit 0 "${F[@]}" --json reshard "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/plan-json" --tp 1 --dp 1 --bucket-size none
python3 - "$WORK/out" <<'PY' || fail "reshard --json: tp, groups or the plan's bytes are not what was written"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tp"] == 1 and j["pp"] is None and j["groups"] == 1, j
assert j["plan"]["bytes_written"] == j["bytes_written"], j
PY

# Refused, nothing written, the reason named.
expect_exit 2 "${F[@]}" reshard "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r1" --tp 3 --dp 1
expect_in "$WORK/err" "does not split over 3 tensor-parallel ranks"
expect_exit 2 "${F[@]}" reshard "$M/ep2-moe-dp_reshardable/ckpt" "$WORK/r2" --tp 2 --dp 1
expect_in "$WORK/err" "an expert-parallel size 2 needs a data-parallel size that is a multiple of it"
expect_exit 2 "${F[@]}" reshard "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r4" --tp 1 --dp 1 --to fully_reshardable
expect_in "$WORK/err" "--tp, --pp and --ep set the layout of dp_reshardable targets"
expect_exit 2 "${F[@]}" reshard "$M/tp2-dp1-fully_reshardable/ckpt" "$WORK/r5" --tp 1 --dp 1
# The bucket size not given where the source's range cuts the target's buckets two ways.
expect_exit 2 "${F[@]}" reshard "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r6" --tp 1 --dp 1
expect_in "$WORK/err" "its buckets give the bucket size only as at least 6656 elements, or none"
expect_in "$WORK/err" "give --bucket-size N or none as the Megatron run that loads the checkpoint is configured"
# Where every size of the range cuts the target alike, the range is enough: the same buckets as the
# run's own setting gives.
expect_exit 0 "${F[@]}" reshard "$M/tp2-dp1-buckets-dp_reshardable/ckpt" "$WORK/buckets-range" --tp 1 --dp 1
expect_exit 0 "${F[@]}" reshard "$M/tp2-dp1-buckets-dp_reshardable/ckpt" "$WORK/buckets-1000" --tp 1 --dp 1 \
  --bucket-size 1000
optimizer_groups "$WORK/buckets-range" | sed 's/"bucket_size": [0-9]*,//' >"$WORK/g-range" || fail "inspect of buckets-range"
optimizer_groups "$WORK/buckets-1000" | sed 's/"bucket_size": [0-9]*,//' >"$WORK/g-1000" || fail "inspect of buckets-1000"
cmp -s "$WORK/g-range" "$WORK/g-1000" || fail "the bucket-size range and the run's bucket size cut differently"
expect_exit 2 "${F[@]}" reshard "$M/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/r7" --pp 3 --dp 1
expect_in "$WORK/err" "layers do not split evenly over 3 pipeline stages"
expect_exit 2 "${F[@]}" reshard "$TESTDATA/ckpt/valid/dp2-bucket" "$WORK/r8" --tp 2 --dp 1
for r in r1 r2 r4 r5 r6 r7 r8; do [ -e "$WORK/$r" ] && fail "a refused reshard wrote $r"; done
finish
