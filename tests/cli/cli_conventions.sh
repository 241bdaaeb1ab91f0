#!/usr/bin/env bash
# The command line's conventions, as git's and cargo's: a mistyped subcommand or option is named with
# the nearest known name, every error line starts with "fpgather:", help shows the defaults each
# command runs with, and --version tells what the build holds.
source "$(dirname "$0")/common.sh"
MODEL="$TESTDATA/models/tiny-llama.safetensors"

# every_line_prefixed FILE: each line of FILE starts with "fpgather:" (and there is one).
every_line_prefixed() {
  [ -s "$1" ] || { fail "no error line"; return; }
  if grep -qv '^fpgather:' "$1"; then
    fail "a line without the fpgather: prefix"
    sed 's/^/    /' "$1" >&2
  fi
}

# Mistyped and unknown subcommands: exit 2, the nearest name when one is close, never a run.
expect_exit 2 "$FPGATHER" inpsect "$MODEL"
[ "$(cat "$WORK/err")" = "fpgather: 'inpsect' is not a command; did you mean 'inspect'?" ] || fail "inpsect: $(cat "$WORK/err")"
[ -s "$WORK/out" ] && fail "inpsect printed on stdout"
expect_exit 2 "$FPGATHER" bogus
[ "$(cat "$WORK/err")" = "fpgather: 'bogus' is not a command; see 'fpgather --help'" ] || fail "bogus: $(cat "$WORK/err")"
expect_exit 2 "$FPGATHER" --json tarin --steps 1          # after a global option, and a swap
expect_in "$WORK/err" "did you mean 'train'?"
expect_exit 2 "$FPGATHER" --threads 2 convetr a b         # the value of --threads is not taken for a command
expect_in "$WORK/err" "'convetr' is not a command; did you mean 'convert'?"
expect_exit 2 "$FPGATHER" bench quantze
expect_in "$WORK/err" "fpgather: 'quantze' is not a bench command; did you mean 'quantize'?"
expect_exit 2 "$FPGATHER" bench
expect_in "$WORK/err" "fpgather: bench: a subcommand is required (see 'fpgather bench --help')"
# Mistyped options, the subcommand's and the global ones after it.
expect_exit 2 "$FPGATHER" train --stpes 3
[ "$(cat "$WORK/err")" = "fpgather: train: unknown option '--stpes'; did you mean '--steps'?" ] || fail "--stpes: $(cat "$WORK/err")"
expect_exit 2 "$FPGATHER" inspect "$MODEL" --jsn
expect_in "$WORK/err" "did you mean '--json'?"
expect_exit 2 "$FPGATHER" inspect "$MODEL" --frobnicate
expect_in "$WORK/err" "fpgather: inspect: unknown option '--frobnicate'; see 'fpgather inspect --help'"
# A word that is an option's value or a subcommand's argument is never taken for a command.
expect_exit 0 "$FPGATHER" --log-level warn inspect "$MODEL"
expect_exit 3 "$FPGATHER" inspect train                   # a file named train, which does not exist
expect_in "$WORK/err" "train"

# Every error line, from the command-line parser and from the run alike, starts with fpgather:.
while IFS= read -r args; do
  read -r -a argv <<<"$args"
  "$FPGATHER" "${argv[@]}" >"$WORK/out" 2>"$WORK/err"
  code=$?
  [ "$code" -eq 2 ] || [ "$code" -eq 3 ] || fail "exit $code, want 2 or 3: fpgather $args"
  every_line_prefixed "$WORK/err"
done <<EOF2

inspect
convert $MODEL
train extra
train --steps many
train --dp 0 --steps 1
bench quantize --rows
inspect $WORK/missing.safetensors
completion fish
--log-level chatty inspect $MODEL
EOF2

# Help: defaults as each command runs with them. No flag shows a stored value as its default.
for sub in train step convert inspect validate diff reshard completion "bench quantize" "bench io"; do
  read -r -a argv <<<"$sub"
  expect_exit 0 "$FPGATHER" "${argv[@]}" --help
  grep -q '{' "$WORK/out" && fail "$sub --help shows a {value}: $(grep '{' "$WORK/out")"
  expect_in "$WORK/out" "Global options (--log-level, --verbose, --quiet, --json, --threads, --no-progress) may also come after"
done
expect_exit 0 "$FPGATHER" train --help
expect_in "$WORK/out" "--nesterov,--no-nesterov    Muon: Nesterov momentum, or plain (default: Nesterov)"
# Nesterov is what muon runs without the flag: the same result as --nesterov, not as --no-nesterov.
muon_loss() { "$FPGATHER" --json train --model tiny --steps 3 --optimizer muon "$@" | grep '"final_loss"'; }
[ "$(muon_loss)" = "$(muon_loss --nesterov)" ] || fail "muon without a flag is not Nesterov"
[ "$(muon_loss)" != "$(muon_loss --no-nesterov)" ] || fail "--no-nesterov changes nothing"
# The learning rate each optimizer trains with is the one --help names ("default 0.001; lion 0.0003, …").
expect_exit 0 "$FPGATHER" train --help
lr_help=$(grep -- '--lr FLOAT' "$WORK/out")
for opt in adamw adam lion muon; do
  lr=$("$FPGATHER" --json train --model tiny --steps 1 --optimizer "$opt" | sed -n 's/^  "lr": \(.*\),$/\1/p')
  [ -n "$lr" ] || { fail "train --optimizer $opt reports no lr"; continue; }
  want=$(python3 -c 'import sys; print(repr(float(sys.argv[1])))' "$lr")
  help=$(python3 - "$lr_help" "$opt" <<'PY'
import re, sys
text, opt = sys.argv[1], sys.argv[2]
common, _, others = re.search(r"\(default ([^)]*)\)", text).group(1).partition("; ")
per = dict(o.rsplit(" ", 1) for o in others.split(", ") if o)  # "lion 0.0003" -> {lion: 0.0003}
print(repr(float(per.get(opt, common))))
PY
)
  [ "$want" = "$help" ] || fail "--optimizer $opt trains with lr $want, --help says $help"
done
expect_exit 0 "$FPGATHER" step --help
expect_in "$WORK/out" "(default 0.001; lion 0.0001)"   # torch's defaults, not train's

# --version: the version, then each backend and library as compiled in.
expect_exit 0 "$FPGATHER" --version
head -1 "$WORK/out" | grep -qE '^fpgather [0-9]+\.[0-9]+\.[0-9]+ \(' || fail "version line: $(head -1 "$WORK/out")"
for name in cuda nccl mpi hdf5 zstd zlib openssl xxhash fmt spdlog nlohmann_json CLI11; do
  grep -qE "^$name: +([0-9]|not built|Open MPI|MPICH|MPI)" "$WORK/out" || fail "--version lacks $name"
done
# What --version says is built is what the commands can use.
"$FPGATHER" --no-progress train --comm mpi --dp 1 --steps 1 >"$WORK/run" 2>&1
if grep -q "^mpi: *not built" "$WORK/out"; then
  grep -q "not built into this fpgather" "$WORK/run" || fail "--version: no mpi, but --comm mpi ran"
else
  grep -q "not built into this fpgather" "$WORK/run" && fail "--version names an mpi that --comm mpi lacks"
fi
"$FPGATHER" --no-progress train --device cuda --steps 1 >"$WORK/run" 2>&1
if grep -q "^cuda: *not built" "$WORK/out"; then
  grep -q "built without CUDA" "$WORK/run" || fail "--version: no cuda, but --device cuda did not say so"
else
  grep -q "built without CUDA" "$WORK/run" && fail "--version names a cuda that --device cuda lacks"
fi
expect_exit 0 "$FPGATHER" inspect "$MODEL" --version   # after a subcommand too
expect_in "$WORK/out" "hdf5:"
finish
