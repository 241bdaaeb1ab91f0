#!/usr/bin/env bash
# --fp32-matrices REGEX of train and step: the matrices it selects stay native fp32 with the layer-wise
# (Muon) optimizer, updated and all-gathered in fp32 by their owners. A layout where rank 0 owns none
# of them (read from --print-layout --json, not assumed) trains with finite, falling losses and equals
# dp 1 with as many micro-batches; step writes the file it writes without the option. Warnings when
# --keep-fp32 leaves Muon no matrix or --fp32-matrices selects none; refusals exit 2.
source "$(dirname "$0")/common.sh"
: "${MAKE_STEP_FILES:?MAKE_STEP_FILES must name the test input generator}"
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
F=("$FPGATHER" --no-progress)
FC2='blocks\.[0-3]\.fc2'
MUON=(--optimizer muon --dp 3 --fp32-matrices "$FC2")

# The layout: every fc2 is an F32 Muon matrix, fc1 stays BF16, and rank 0 owns no F32 matrix.
expect_exit 0 "${F[@]}" --json train "${MUON[@]}" --print-layout
python3 - "$WORK/out" <<'PY' || fail "layout of --fp32-matrices: rank 0 must own no fp32 matrix, others must"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["kind"] == "layer_wise" and j["fp32_matrices"] is True, j.get("kind")
fp32 = [m for m in j["matrices"] if m["dtype"] == "F32"]
assert sorted(m["name"] for m in fp32) == [f"blocks.{i}.fc2.weight" for i in range(4)], fp32
assert all(m["dtype"] == "BF16" for m in j["matrices"] if ".fc1." in m["name"])
owners = {m["owner"] for m in fp32}
assert 0 not in owners and owners == {1, 2}, owners
PY
expect_exit 0 "${F[@]}" train "${MUON[@]}" --print-layout
grep -qE '^ +0 +[0-9]+ +[0-9]+ +[1-9][0-9]* +0$' "$WORK/out" || fail "--print-layout: rank 0's F32 gather is not empty-handed"
expect_in "$WORK/out" "(fp32-kept matrices included)"

# Training: finite losses that fall; dp 3 equals dp 1 with 3 micro-batches bit for bit.
expect_exit 0 "${F[@]}" --json train "${MUON[@]}" --steps 40 --metrics "$WORK/m.jsonl"
cp "$WORK/out" "$WORK/dp3.json"
expect_exit 0 "${F[@]}" --json train --optimizer muon --dp 1 --accumulation 3 --fp32-matrices "$FC2" --steps 40
cp "$WORK/out" "$WORK/dp1.json"
python3 - "$WORK/dp3.json" "$WORK/dp1.json" "$WORK/m.jsonl" <<'PY' || fail "--fp32-matrices training"
import json, math, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
losses = [json.loads(line)["loss"] for line in open(sys.argv[3])]
assert len(losses) == 40 and all(math.isfinite(x) for x in losses), losses
assert a["final_loss"] < a["initial_loss"] / 2, (a["initial_loss"], a["final_loss"])
assert a["final_loss"] == b["final_loss"], (a["final_loss"], b["final_loss"])
PY
expect_exit 0 "${F[@]}" train "${MUON[@]}" --steps 4 --save "$WORK/ck"
expect_exit 0 "${F[@]}" inspect "$WORK/ck" --keys
grep -qE '^weight/blocks\.1\.fc2\.weight +weight +F32 ' "$WORK/out" || fail "checkpoint: blocks.1.fc2.weight is not stored F32"
grep -qE '^weight/blocks\.1\.fc1\.weight +weight +BF16 ' "$WORK/out" || fail "checkpoint: blocks.1.fc1.weight is not stored BF16"
expect_exit 0 "${F[@]}" train "${MUON[@]}" --steps 6 --load "$WORK/ck"
expect_in "$WORK/out" "resumed from"

# step: the same matrices, the same file as without the option (it changes storage, not the update).
S="$WORK/step"
mkdir -p "$S"
"$MAKE_STEP_FILES" random "$S" || fail "generate step files"
for extra in "" "--fp32-matrices fc2"; do
  read -r -a x <<<"$extra"
  expect_exit 0 "${F[@]}" --json step --optimizer muon --dp 3 "${x[@]}" --params "$S/in.safetensors" \
    --grads "$S/g1.safetensors" --out "$S/out${#x[@]}.safetensors"
  expect_in "$WORK/out" '"muon_params": 4'
  [ -s "$WORK/err" ] && fail "step $extra: unexpected stderr: $(head -2 "$WORK/err")"
done
cmp -s "$S/out0.safetensors" "$S/out2.safetensors" || fail "step --fp32-matrices changed OUT"

# Warnings: a --keep-fp32 that takes every matrix from Muon, a --fp32-matrices that selects none.
expect_exit 0 "${F[@]}" train --optimizer muon --keep-fp32 weight --steps 2
expect_in "$WORK/err" "fpgather: warning: --keep-fp32 'weight' selects every matrix, which leaves Muon none"
expect_exit 0 "${F[@]}" train --optimizer muon --keep-fp32 weight --print-layout
expect_in "$WORK/err" "fpgather: warning: --keep-fp32 'weight' selects every matrix"
expect_in "$WORK/out" "0 Muon matrices"
expect_exit 0 "${F[@]}" train --optimizer muon --fp32-matrices nothing --steps 2
expect_in "$WORK/err" "fpgather: warning: --fp32-matrices 'nothing' selects no matrix of model 'tiny'"
expect_exit 0 "${F[@]}" train --optimizer muon --keep-fp32 norm --steps 2  # norms only: Muon keeps its matrices
[ -s "$WORK/err" ] && fail "--keep-fp32 norm warned: $(cat "$WORK/err")"
expect_exit 0 "${F[@]}" step --optimizer muon --keep-fp32 'weight' --params "$S/in.safetensors" \
  --grads "$S/g1.safetensors" --out "$S/kept.safetensors"
expect_in "$WORK/err" "fpgather: warning: --keep-fp32 'weight' selects every matrix, which leaves Muon none"

# Refusals, exit 2 before anything runs.
expect_exit 2 "${F[@]}" train --fp32-matrices fc2 --steps 2
expect_in "$WORK/err" "--fp32-matrices needs the layer-wise distributed optimizer"
expect_exit 2 "${F[@]}" train --optimizer muon --keep-fp32 fc1 --fp32-matrices fc2 --steps 2
expect_in "$WORK/err" "--keep-fp32 'fc1' selects the matrix 'blocks.0.fc1.weight', which --fp32-matrices 'fc2' does not"
expect_exit 2 "${F[@]}" train --optimizer muon --fp32-matrices '(' --steps 2
expect_in "$WORK/err" "--fp32-matrices: invalid regular expression '('"
expect_exit 2 "${F[@]}" step --optimizer adamw --fp32-matrices fc2 --params "$S/in.safetensors" \
  --grads "$S/g1.safetensors" --out "$S/never.safetensors"
[ -e "$S/never.safetensors" ] && fail "a refused step wrote its output"
finish
