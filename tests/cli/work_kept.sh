#!/usr/bin/env bash
# No finished work is lost to an output that cannot be written, and wrong-kind inputs say what they
# are: train --save checks its target before the first step; --metrics and step --out refuse an
# existing file without --force; a resumed run at its --steps has nothing to do; a checkpoint-writing
# conversion refuses an OUT named as a file; --load of a run without a committed checkpoint, --init
# of a training checkpoint and validate of a file or a missing path each get a message of their own.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
cd "$WORK" || exit 1

# refused CODE MESSAGE ARGS...: exit CODE, MESSAGE (fixed) on stderr, nothing on stdout.
refused() {
  local code=$1 want=$2; shift 2
  expect_exit "$code" "${F[@]}" "$@"
  expect_in "$WORK/err" "$want"
  [ -s "$WORK/out" ] && fail "printed on stdout: $*"
}

expect_exit 0 "${F[@]}" train --steps 4 --save run --save-every 2
# The step-4 checkpoint a second run would save exists: refused before any step, nothing changes.
before=$(ls -A run)
refused 2 "fpgather: error: --save run: run/step-00000002 already exists, and this run would save it (a checkpoint is never written over another); resume from it with --load run, or give another --save DIR" \
  train --steps 4 --save run --save-every 2
refused 2 "run/step-00000004 already exists" train --steps 4 --save run
[ "$(ls -A run)" = "$before" ] || fail "a refused run changed its root"
# Resumed past the saved steps, the same root is fine; resumed at --steps there is nothing to do.
expect_exit 0 "${F[@]}" train --steps 6 --save run --save-every 2 --load run
expect_in "$WORK/out" "saved run/step-00000006"
expect_exit 0 "${F[@]}" train --steps 6 --load run
expect_in "$WORK/out" "resumed from run/step-00000006 at step 6"
expect_in "$WORK/out" "nothing to do: the run is at step 6, the --steps to reach"
grep -q "^loss" "$WORK/out" && fail "a run of no steps printed a loss"
# A root that is a file, or one that cannot be written (not as root, who writes anywhere).
: >afile
refused 2 "--save afile: not a directory (a checkpoint root is one)" train --steps 1 --save afile
if [ "$(id -u)" -ne 0 ]; then
  mkdir ro && chmod 555 ro
  refused 2 "--save ro: not writable" train --steps 1 --save ro
fi

# --load of a run directory whose first save never completed; of a missing one.
mkdir fresh
refused 3 "fresh: no committed checkpoint to resume from (no index.h5, no \`latest\`): a run directory holds one only once a save into it has completed (a run stopped during its first save leaves none); start the run again without --load (with --save fresh)" \
  train --steps 2 --load fresh
refused 3 "fpgather: error: nope: no such file or directory" train --steps 2 --load nope
# --init of a training checkpoint: --load resumes one.
refused 2 "--init run is a training checkpoint: resume it with --load run" train --steps 2 --init run

# --metrics: an existing file is refused without --force; replaced with it.
echo old >m.jsonl
refused 2 "m.jsonl: the metrics file exists: give --force to replace it" train --steps 2 --metrics m.jsonl
[ "$(cat m.jsonl)" = old ] || fail "a refused run changed its metrics file"
expect_exit 0 "${F[@]}" train --steps 2 --metrics m.jsonl --force
[ "$(wc -l <m.jsonl)" -eq 2 ] || fail "--force did not replace the metrics file"

# A conversion that writes a checkpoint refuses an OUT named as a file, naming the form to use.
refused 2 "fpgather: error: OUT out.safetensors: --fp8 of a checkpoint writes a checkpoint, a directory, and a path ending in .safetensors names one safetensors file: give a directory (e.g. out), or for a safetensors file of its FP8 weights export it with --dtype fp8" \
  convert run out.safetensors --fp8 blockwise
refused 2 "OUT out.safetensors: --compress writes a checkpoint" convert run out.safetensors --compress none
refused 2 "OUT out.json: --to dcp writes a checkpoint, a directory, and a path ending in .json names a safetensors index" \
  convert run out.json --to dcp
[ -e out.safetensors ] || [ -e out.json ] || [ -n "$(ls -A . | grep '^\.out')" ] && fail "a refused conversion wrote something"

# validate: a file that is no safetensors file, a missing path.
echo hello >afile.txt
refused 3 "fpgather: error: afile.txt: not a checkpoint: a file, where a checkpoint is a directory holding index.h5 or latest (fpgather), .metadata or __<rank>.metadata (PyTorch DCP, Megatron torch_dist) or model.safetensors or model.safetensors.index.json (a safetensors model); the one file taken is a .safetensors file or its index .json" \
  validate afile.txt
refused 3 "fpgather: error: nope: no such file or directory" validate nope
# A file named as a model is still read as one, and its reader says what is wrong.
echo hello >bad.safetensors
refused 3 "bad.safetensors: " validate bad.safetensors
grep -q "not a checkpoint" "$WORK/err" && fail "a .safetensors file was not read as one"

finish
