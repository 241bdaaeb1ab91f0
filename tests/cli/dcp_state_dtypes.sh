#!/usr/bin/env bash
# PyTorch DCP state beyond the parameters (testdata/dcp/make_state_cases.py, torch 2.15): keys of a
# dtype fpgather cannot represent affect only themselves (listed, compared as bytes, refused by
# convert by key and dtype; complex64 exported as safetensors C64); AdamW's 0-d steps, torchtitan's
# train_state and param_groups (bytes entries) shown, compared and exported under their own keys;
# diff --ignore.
source "$(dirname "$0")/common.sh"
D="$TESTDATA/dcp"
F=(timeout 60 "$FPGATHER" --no-progress)

# Dtypes: the checkpoint stays valid, each key is named with its torch dtype.
expect_exit 0 "${F[@]}" inspect --keys "$D/dtypes"
expect_in "$WORK/out" "dtype fpgather cannot represent: buffers.c128 (torch.complex128"
expect_in "$WORK/out" "dtype fpgather cannot represent: nvfp4.packed (torch.float4_e2m1fn_x2"
expect_in "$WORK/out" "complex32"
expect_exit 0 "${F[@]}" --json inspect "$D/dtypes"
python3 -c 'import json,sys; u = json.load(open(sys.argv[1]))["unsupported_dtypes"]; assert {"key": "buffers.c32", "dtype": "torch.complex32"} in u and len(u) == 3, u' \
  "$WORK/out" || fail "inspect --json: unsupported_dtypes"
for v in "" --data; do
  expect_exit 0 "${F[@]}" validate $v "$D/dtypes"
  expect_in "$WORK/out" "valid: PyTorch DCP, 5 tensor keys"
  expect_in "$WORK/out" "3 keys of a dtype fpgather cannot represent"
done
expect_exit 0 "${F[@]}" --json validate "$D/dtypes"
python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); assert d["valid"] and not d["problems"], d' \
  "$WORK/out" || fail "validate --json: dtypes valid, no problems"
expect_exit 0 "${F[@]}" diff "$D/dtypes" "$D/dtypes"
expect_in "$WORK/out" "equal: 5 keys"
expect_exit 1 "${F[@]}" diff "$D/dtypes" "$D/dtypes_changed"
expect_in "$WORK/out" "buffers.c128: values:"
expect_exit 0 "${F[@]}" diff "$D/dtypes" "$D/dtypes_changed" --ignore 'buffers.c128'
expect_exit 3 "${F[@]}" convert "$D/dtypes" "$WORK/d.safetensors"
expect_in "$WORK/err" "2 keys cannot be exported"
expect_in "$WORK/err" "key 'buffers.c32' has dtype torch.complex32, which fpgather cannot represent"
[ -e "$WORK/d.safetensors" ] && fail "a refused export left its output"
expect_exit 0 "${F[@]}" convert "$D/complex64" "$WORK/c.safetensors" --dtype fp32
expect_exit 0 "${F[@]}" diff "$WORK/c.safetensors" "$D/expected_complex64.safetensors"
expect_in "$WORK/out" "equal: 2 keys"
expect_exit 0 "${F[@]}" inspect "$WORK/c.safetensors"
expect_in "$WORK/out" "C64"

# Non-parameter state: a changed step and a changed lr are differences.
expect_exit 1 "${F[@]}" diff "$D/train_state" "$D/train_state_next"
expect_in "$WORK/out" "optim.state.0.weight.step: values: 1 of 1 elements differ"
expect_in "$WORK/out" "train_state.step: values"
expect_exit 1 "${F[@]}" diff "$D/train_state" "$D/train_state_lr"
expect_in "$WORK/out" "optim.param_groups.0.lr: value: 0.01 vs 0.005"
expect_exit 0 "${F[@]}" diff "$D/train_state" "$D/train_state_lr" --ignore 'optim.param_groups.*'
expect_exit 0 "${F[@]}" diff "$D/train_state" "$D/train_state_next" --ignore '*.step'
expect_exit 0 "${F[@]}" diff "$D/train_state" "$D/train_state"
expect_in "$WORK/out" "equal: 39 keys"
expect_exit 1 "${F[@]}" --json diff "$D/train_state" "$D/train_state_lr"
python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); assert [x["what"] for x in d["differences"] if x["key"] == "optim.param_groups.0.lr"] == ["value"], d' \
  "$WORK/out" || fail "diff --json: the lr difference"
# The weights alone are the model section's; --states adds the steps and train_state under their
# own keys; --to dcp keeps them.
expect_exit 0 "${F[@]}" convert "$D/train_state" "$WORK/w.safetensors" --dtype fp32
expect_exit 0 "${F[@]}" inspect "$WORK/w.safetensors"
expect_in "$WORK/out" "4 tensors"
grep -qF "step" "$WORK/out" && fail "a weights export holds a step"
expect_exit 0 "${F[@]}" convert "$D/train_state" "$WORK/s.safetensors" --states --dtype fp32
expect_exit 0 "${F[@]}" inspect "$WORK/s.safetensors"
expect_in "$WORK/out" "optim.state.1.bias.step"
expect_in "$WORK/out" "train_state.step"
expect_exit 0 "${F[@]}" convert "$D/train_state" "$WORK/s.dcp" --to dcp --states --dtype fp32
# storage_meta.checkpoint_id is the output's path, not where it was staged; planner_data is nested
# as torch's planner writes it (tests/interop/test_dcp_convert_torch.py reads both with torch).
python3 - "$WORK/s.dcp/.metadata" "$WORK/s.dcp" <<'PY' || fail "convert --to dcp: checkpoint_id and planner_data"
import pickletools, sys
strings = [a for op, a, _ in pickletools.genops(open(sys.argv[1], "rb").read()) if isinstance(a, str)]
assert sys.argv[2] in strings and not any(".tmp-" in s for s in strings), strings
assert "model.0.weight" in strings  # planner_data: the key, then its path
assert "model" in strings and "0.weight" in strings, strings
PY
expect_exit 0 "${F[@]}" inspect --keys "$WORK/s.dcp"
expect_in "$WORK/out" "optim.state.1.bias.step"
expect_exit 0 "${F[@]}" inspect --key optim.param_groups.0.lr "$WORK/s.dcp"
expect_in "$WORK/out" "0.01"
expect_exit 0 "${F[@]}" diff "$WORK/s.dcp" "$D/train_state"
expect_in "$WORK/out" "equal: 39 keys"
# Without --states, the weights alone.
expect_exit 0 "${F[@]}" convert "$D/train_state" "$WORK/w.dcp" --to dcp --dtype fp32
expect_exit 0 "${F[@]}" inspect "$WORK/w.dcp"
expect_in "$WORK/out" "4 tensor keys (4 chunks, 0.00 MB), 0 bytes entries"
finish
