#!/usr/bin/env bash
# --json of every command, validated against its schema in man/json/ (tests/cli/json_schema.py): the
# output of each form a command has (train fresh, resumed, with nothing to do and --print-layout;
# inspect of each format, --keys, --key; reshard and its dry run; each convert operation; diff equal
# and different; the benchmarks that run without a GPU), and errors as {"error", "exit_code",
# "signal"} on stderr. JSON_SAMPLES=DIR keeps every document there.
source "$(dirname "$0")/common.sh"
: "${SRC:?SRC must name the source tree}"
: "${MAKE_STEP_FILES:?MAKE_STEP_FILES must name the test input generator}"
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
F=("$FPGATHER" --no-progress --json)
SCHEMAS="$SRC/man/json"
mkdir -p "$WORK/docs"
n=0

# valid SCHEMA FILE: FILE holds one document that the schema accepts.
valid() {
  n=$((n + 1))
  cp "$2" "$WORK/docs/$1-$n.json"
  python3 "$SRC/tests/cli/json_schema.py" "$SCHEMAS/$1.schema.json" "$2" 2>"$WORK/problems" ||
    { fail "$1 --json (document $n) does not match $1.schema.json"; sed 's/^/    /' "$WORK/problems" | head -8 >&2; }
}
# json CODE SCHEMA CMD...: CMD exits CODE and prints one document that SCHEMA accepts on stdout.
json() {
  local code=$1 schema=$2; shift 2
  expect_exit "$code" "${F[@]}" "$@"
  valid "$schema" "$WORK/out"
}
# error CODE CMD...: CMD exits CODE and reports a JSON error whose exit_code is CODE on stderr.
error() {
  local code=$1; shift
  expect_exit "$code" "${F[@]}" "$@"
  valid error "$WORK/err"
  python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); sys.exit(d["exit_code"] != int(sys.argv[2]))' \
    "$WORK/err" "$code" || fail "error of '$*' does not give exit_code $code: $(cat "$WORK/err")"
}

cd "$WORK" || exit 1
# every schema is itself a valid JSON document with a title
for s in "$SCHEMAS"/*.schema.json; do
  python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["title"]' "$s" || fail "$s is no schema"
done

# train
json 0 train train --steps 4 --save run --save-every 2 --metrics m.jsonl
json 0 train train --steps 6 --load run --save run --lr 5e-4
json 0 train train --steps 6 --load run
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["nothing_to_do"] is True' "$WORK/out" ||
  fail "train with nothing to do: nothing_to_do is not true"
json 0 train train --optimizer muon --fp8 mxfp8 --keep-fp32 norm --steps 2
json 0 train train --optimizer lion --fp8 delayed --bucket-size 20000 --pad-for-nccl --steps 2 --save lion
json 0 layout train --print-layout --dp 3 --bucket-size 20000
json 0 layout train --print-layout --optimizer muon --dp 3

# inspect: fpgather (summary, keys, key), safetensors, DCP, Megatron
json 0 inspect inspect run
python3 - "$WORK/out" <<'PY' || fail "inspect --json is not typed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["step"] == 6 and j["layout"] == {"kind": "bucketed", "dp": 2}, j
assert j["model"] == {"name": "tiny", "params": 15} and j["fp8"]["enabled"] is False, j
t = j["training"]
assert t["next_step"] == 6 and t["settings"]["lr"] == 0.0005 and t["settings"]["betas"] == [0.9, 0.999], t
assert t["settings"]["bucket_size"] is None and t["settings"]["pad_for_nccl"] is False, t
PY
json 0 inspect inspect --keys run
json 0 inspect inspect lion
json 0 inspect inspect "$TESTDATA/megatron/dp1-buckets-padded/ckpt"  # groups with a bucket size range
json 0 inspect inspect --key optimizer/blocks.0.fc1.weight/exp_avg run
json 0 inspect inspect "$TESTDATA/models/tiny-llama.safetensors"
json 0 inspect inspect --key model.norm.weight "$TESTDATA/models/tiny-llama.safetensors"
json 0 inspect inspect "$TESTDATA/models/tiny-llama-sharded"
json 0 inspect inspect --keys "$TESTDATA/dcp/small"
json 0 inspect inspect --key f32 "$TESTDATA/dcp/small"
json 0 inspect inspect "$TESTDATA/megatron/dp1-one-bucket/ckpt"

# validate
json 0 validate validate run
json 0 validate validate --data run
json 0 validate validate --data "$TESTDATA/models/tiny-llama.safetensors"
json 0 validate validate --data "$TESTDATA/dcp/small"
json 0 validate validate "$TESTDATA/megatron/dp1-one-bucket/ckpt"
json 1 validate validate "$TESTDATA/ckpt/broken/gap"

# reshard
json 0 reshard reshard run run1 --dp 1
python3 - "$WORK/out" <<'PY' || fail "reshard --json is not typed"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["from"]["dp"] == 2 and j["to"]["dp"] == 1 and j["to"]["accumulation"] == 2, j
assert j["to"]["bucket_size"] is None and j["resume"] == "fpgather train --load run1", j
PY
json 0 reshard reshard run plan --dp 4 --accumulation 1 --dry-run
json 0 reshard reshard "$TESTDATA/megatron/dp1-one-bucket/ckpt" mg2 --dp 2

# convert: each operation
json 0 convert convert run w.safetensors
json 0 convert convert run states.safetensors --states --dtype fp32
json 0 convert convert "$TESTDATA/models/tiny-llama.safetensors" q.safetensors --fp8 blockwise
json 0 convert convert q.safetensors back.safetensors --dequantize
json 0 convert convert run run-none --compress none
json 0 convert convert run run-fp8 --fp8 tensorwise
python3 "$TESTDATA/megatron/hf/hf_reference.py" template "$TESTDATA/megatron/parallel/tp2-dp1-dp_reshardable" llama hf.json
json 0 convert convert "$TESTDATA/megatron/parallel/tp2-dp1-dp_reshardable/ckpt" hf-out --to hf --hf-config hf.json
json 0 convert convert "$TESTDATA/megatron/hf/models/qwen3_moe" mg-out --to megatron --tp 2 --ep 2

# diff
json 0 diff diff run run1
json 1 diff diff run/step-00000002 run
python3 - "$WORK/out" <<'PY' || fail "diff --json values are not typed"
import json, sys
j = json.load(open(sys.argv[1]))
firsts = [f for d in j["differences"] for f in d["first"]]
assert firsts and all(isinstance(f["a"], (int, float)) and isinstance(f["b"], (int, float)) for f in firsts), firsts[:3]
assert all(d["range"] is None or len(d["range"]) == 2 for d in j["differences"]), j["differences"][:2]
PY

# step
mkdir -p stepfiles
"$MAKE_STEP_FILES" golden adamw_default_n1 stepfiles || fail "generate step files"
read -r -a flags <stepfiles/flags
json 0 step step "${flags[@]}" --params stepfiles/in.safetensors --grads stepfiles/g1.safetensors --out s1.safetensors

# bench: those that need no GPU, at small sizes
json 0 bench bench quantize --rows 64 --cols 256
json 0 bench bench io --dir "$WORK" --size-gib 0.01 --ranks 2 --reps 1
json 0 bench bench validate --dir "$WORK" --chunks 1000 --keys 10 --ranks 2
json 0 bench bench step --model tiny --dp-list 1,2 --steps 1 --min-seconds 0
json 0 bench bench reshard --dir "$WORK" --models tiny --plain-gib 0.01
json 0 bench bench reshard --dir "$WORK" --megatron tp full --megatron-layers 2 --megatron-hidden 64 --plain-gib 0.01
json 0 bench bench dcp-make "$WORK/dcp" --chunks 6 --keys 2 --ranks 2
json 0 bench bench dcp "$WORK/dcp" --reps 1 --export-reps 1 --export-dir "$WORK"
json 0 bench bench megatron-make "$WORK/mg" --tp 1 --pp 1 --dp 2 --layers 1 --hidden 64 --ffn 128 --heads 2 \
  --query-groups 2 --vocab 128

# errors: usage (parse and run time), input, check failed
error 2 train --steps 0
error 2 train --bogus
error 2 tarin
error 2 train --steps 20 --dp 3 --load run
error 3 validate nope
error 3 inspect "$TESTDATA/safetensors/bad/header_too_large.safetensors"
error 2 reshard run run1 --dp 2

if [ -n "${JSON_SAMPLES:-}" ]; then mkdir -p "$JSON_SAMPLES" && cp "$WORK"/docs/*.json "$JSON_SAMPLES"/; fi
echo "$n documents validated"
finish
