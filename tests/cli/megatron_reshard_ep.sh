#!/usr/bin/env bash
# reshard --ep (and --tp/--pp/--dp) of Megatron-Core MoE dp_reshardable checkpoints
# (testdata/megatron/parallel, written by Megatron-Core 0.19.2 at EP 2: a chained dense + expert
# distributed optimizer). At EP 1 the experts join the dense buffers (one optimizer, no chained_N.
# prefix, the common state's optimizer entry one optimizer's); at EP > 1 each expert-parallel rank's
# experts get an expert group. Every output validates with its data read (the reader recovers the
# layout of every group written, experts in the dense groups included) and equals, parameter for
# parameter, Megatron's own fully_reshardable save of the same state; EP 2 -> 1 -> 2 gives back
# Megatron's own groups. What the target cannot hold is refused, nothing written.
source "$(dirname "$0")/common.sh"
M="$TESTDATA/megatron/parallel"
F=("$FPGATHER" --no-progress)

# source, target options, the layout validate names (one group: none).
for c in "ep2-moe|--ep 1 --dp 2 --bucket-size none|" \
         "ep2-moe|--ep 1 --dp 1 --bucket-size none|" \
         "ep2-moe-dense-first|--ep 1 --dp 2 --bucket-size none|" \
         "ep2-moe|--ep 2 --dp 4|EP 2" \
         "ep2-moe|--tp 2 --ep 2 --dp 2|TP 2" \
         "ep2-moe|--pp 2 --ep 2 --dp 2|PP 2" \
         "hf-mixtral|--ep 1 --dp 1 --bucket-size none|" \
         "hf-qwen3-moe|--ep 1 --dp 2 --bucket-size none|"; do
  IFS='|' read -r name opts layout <<<"$c"
  out="$WORK/$name$(echo "$opts" | tr -d ' -')"
  expect_exit 0 "${F[@]}" reshard "$M/$name-dp_reshardable/ckpt" "$out" $opts
  expect_in "$WORK/out" "(dp_reshardable) -> $out (dp_reshardable, "
  expect_exit 0 "${F[@]}" validate --data "$out"
  expect_in "$WORK/out" "; 0 problems"
  [ -z "$layout" ] || expect_in "$WORK/out" "$layout"
  twin="$M/$name-fully_reshardable/ckpt"
  [ -d "$twin" ] || twin="$M/$name-dp_reshardable/ckpt"  # (the hf fixtures have one save)
  expect_exit 0 "${F[@]}" diff "$out" "$twin"
  expect_in "$WORK/out" "equal:"
  case $opts in
    *"--ep 1"*)  # one optimizer: no chained_N. key, the common state's entry not chained
      "${F[@]}" --json inspect "$out" >"$WORK/inspect.json" || fail "$name $opts: inspect"
      grep -q '"chained_' "$WORK/inspect.json" && fail "$name $opts: chained keys written at EP 1" ;;
  esac
done

# There and back: EP 2 -> 1 -> 2 rebuilds Megatron's own groups (dense and expert), bucket for bucket.
expect_exit 0 "${F[@]}" reshard "$M/ep2-moe-dp_reshardable/ckpt" "$WORK/ep1" --ep 1 --dp 2 --bucket-size none
expect_exit 0 "${F[@]}" reshard "$WORK/ep1" "$WORK/ep2" --ep 2 --dp 2 --bucket-size none
optimizer_groups "$M/ep2-moe-dp_reshardable/ckpt" >"$WORK/g-src" || fail "inspect of the source"
optimizer_groups "$WORK/ep2" >"$WORK/g-back" || fail "inspect of the round trip"
[ -s "$WORK/g-src" ] || fail "inspect --json reported no optimizer groups"
cmp -s "$WORK/g-src" "$WORK/g-back" ||
  fail "--ep 1 then --ep 2 does not give back Megatron's groups: $(diff "$WORK/g-src" "$WORK/g-back" | head -5)"
expect_exit 0 "${F[@]}" diff "$WORK/ep2" "$M/ep2-moe-dp_reshardable/ckpt"
expect_in "$WORK/out" "equal:"
expect_exit 0 "${F[@]}" validate --data "$WORK/ep2"
expect_in "$WORK/out" "; 0 problems"

# Refused, nothing written, the reason named.
expect_exit 2 "${F[@]}" reshard "$M/ep2-moe-dp_reshardable/ckpt" "$WORK/r1" --ep 3 --dp 3
expect_in "$WORK/err" "4 experts per MoE layer do not divide over 3 expert-parallel ranks"
expect_exit 2 "${F[@]}" reshard "$M/ep2-moe-dp_reshardable/ckpt" "$WORK/r2" --ep 2 --dp 1
expect_in "$WORK/err" "needs a data-parallel size that is a multiple of it"
expect_exit 2 "${F[@]}" reshard "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r3" --ep 2 --dp 2
expect_in "$WORK/err" "holds no MoE experts"
expect_exit 2 "${F[@]}" reshard "$M/ep2-moe-dp_reshardable/ckpt" "$WORK/r4" --ep 1 --dp 2 --to fully_reshardable
expect_in "$WORK/err" "--tp, --pp and --ep set the layout of dp_reshardable targets"
for r in r1 r2 r3 r4; do [ -e "$WORK/$r" ] && fail "a refused reshard wrote $r"; done
finish
