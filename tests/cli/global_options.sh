#!/usr/bin/env bash
# Global options and exit codes of the fpgather binary; the global options work the same before and
# after the subcommand, for every subcommand.
source "$(dirname "$0")/common.sh"

expect_exit 0 "$FPGATHER" --version
expect_in "$WORK/out" "fpgather "
expect_exit 0 "$FPGATHER" --help
for sub in convert inspect bench; do expect_in "$WORK/out" "$sub"; done
expect_exit 2 "$FPGATHER"                       # a subcommand is required
expect_exit 2 "$FPGATHER" no-such-subcommand
expect_exit 2 "$FPGATHER" --log-level chatty inspect "$TESTDATA/models/tiny-llama.safetensors"
expect_in "$WORK/err" "unknown log level"
FPGATHER_LOG=chatty expect_exit 2 "$FPGATHER" inspect "$TESTDATA/models/tiny-llama.safetensors"
expect_exit 3 "$FPGATHER" inspect "$WORK/does-not-exist.safetensors"
expect_in "$WORK/err" "does-not-exist.safetensors"

# Before or after the subcommand: the same run, the same output (timings masked).
CK="$TESTDATA/ckpt/valid"
MODEL="$TESTDATA/models/tiny-llama.safetensors"
mask() {
  if [ -n "${MASK_ALL:-}" ]; then sed -E 's/-?[0-9][0-9.e+-]*/N/g' "$1"; return; fi  # measurements
  sed -E 's/"(seconds|step_time_ms|[a-z_]*_s|[a-z_]*_ms)": [0-9.e+-]+/"\1": T/; s/"(forward_backward|reduce_scatter|optimizer|copy_back|gather|decode)": [0-9.e+-]+/"\1": T/' "$1"
}
# same_both_ways GLOBAL... -- SUBCOMMAND ARGS...: exit 0 and equal stdout with GLOBAL before and after.
same_both_ways() {
  local global=() rest
  while [ "$1" != -- ]; do global+=("$1"); shift; done
  shift
  expect_exit 0 "$FPGATHER" "${global[@]}" "$@"
  mask "$WORK/out" >"$WORK/before"
  rest=("$@")
  # after every word of the subcommand's command line (bench quantize: after quantize)
  expect_exit 0 "$FPGATHER" "${rest[@]}" "${global[@]}"
  mask "$WORK/out" >"$WORK/after"
  cmp -s "$WORK/before" "$WORK/after" || { fail "${global[*]} before and after '$*' differ"; diff "$WORK/before" "$WORK/after" | head -5 >&2; }
  grep -q '^{' "$WORK/before" || [[ " ${global[*]} " != *" --json "* ]] || fail "--json $*: no JSON"
}
same_both_ways --json --no-progress -- train --model tiny --steps 2
same_both_ways --json -- train --print-layout
same_both_ways --json --threads 2 -- inspect "$MODEL"
same_both_ways --json -- inspect "$CK/dp2-model"
same_both_ways --json --no-progress -- validate "$CK/dp2-model"
same_both_ways --json -- diff "$CK/dp2-model" "$CK/dp4-model"
expect_exit 0 "$FPGATHER" --no-progress train --model tiny --steps 2 --save "$WORK/run"
same_both_ways --json --threads 3 -- reshard "$WORK/run" "$WORK/never-written" --dp 1 --dry-run
expect_in "$WORK/after" '"threads": 3'   # --threads after reshard is the global one
same_both_ways --json --log-level error -- convert "$MODEL" "$WORK/q.safetensors" --fp8 tensorwise --force
MASK_ALL=1 same_both_ways --json -- bench quantize --rows 64 --cols 256 --recipe tensorwise --input fp32 \
  --thread-counts 1 --min-seconds 0.01
expect_exit 0 "$FPGATHER" --no-progress completion bash
expect_exit 0 "$FPGATHER" completion zsh --no-progress
# A global option after the subcommand takes effect: a bad log level is refused there too.
expect_exit 2 "$FPGATHER" inspect "$MODEL" --log-level chatty
expect_in "$WORK/err" "unknown log level"
# Given twice, before and after: the flag is simply on.
expect_exit 0 "$FPGATHER" --json inspect "$MODEL" --json
grep -q '^{' "$WORK/out" || fail "--json twice: no JSON"
# The subcommands have no --json or --threads of their own any more: one meaning, the global one.
for sub in inspect validate reshard; do
  "$FPGATHER" "$sub" --help >"$WORK/out"
  grep -qE '^  --(json|threads)' "$WORK/out" && fail "$sub --help lists its own --json or --threads"
done
# -V is --version; `fpgather help CMD` prints what `fpgather CMD --help` does.
"$FPGATHER" --version >"$WORK/v1"
expect_exit 0 "$FPGATHER" -V
cmp -s "$WORK/out" "$WORK/v1" || fail "-V differs from --version"
for sub in "" train convert "bench quantize"; do
  read -r -a argv <<<"$sub"
  "$FPGATHER" "${argv[@]}" --help >"$WORK/h1"
  expect_exit 0 "$FPGATHER" help "${argv[@]}"
  cmp -s "$WORK/out" "$WORK/h1" || fail "help $sub differs from $sub --help"
done
expect_exit 2 "$FPGATHER" help nope
expect_in "$WORK/err" "help: 'nope' is not a command"

# -v / -vv / -q: log levels that change what is printed on stderr; refused together or with --log-level.
cd "$WORK" || exit 1
expect_exit 0 "$FPGATHER" --no-progress train --steps 2 --save vrun
[ -s "$WORK/err" ] && fail "train printed on stderr at the default level: $(head -2 "$WORK/err")"
expect_exit 0 "$FPGATHER" -v --no-progress train --steps 4 --save vrun --load vrun
expect_in "$WORK/err" "fpgather: info: loading vrun"
expect_in "$WORK/err" "fpgather: info: training steps 2 to 4 on dp 2"
expect_in "$WORK/err" "fpgather: info: saving vrun/step-00000004 after step 4"
expect_in "$WORK/err" "fpgather: info: committed vrun/step-00000004"
grep -q "debug:" "$WORK/err" && fail "-v printed debug lines"
expect_exit 0 "$FPGATHER" validate vrun -vv
expect_in "$WORK/err" "fpgather: debug: vrun: opening as fpgather"
expect_in "$WORK/err" "fpgather: debug: open vrun/step-00000004/index.h5"
mkdir -p vrun/.step-00000009.tmp-0123456789abcdef && touch -d '2 minutes ago' vrun/.step-00000009.tmp-0123456789abcdef
expect_exit 0 "$FPGATHER" -q train --steps 6 --save vrun --load vrun
[ -s "$WORK/err" ] && fail "-q printed on stderr: $(head -2 "$WORK/err")"
[ -e vrun/.step-00000009.tmp-0123456789abcdef ] && fail "the stale staging was kept"
expect_exit 2 "$FPGATHER" -q -v train --steps 1
expect_in "$WORK/err" "-q (--quiet) and -v (--verbose) contradict each other"
expect_exit 2 "$FPGATHER" train --steps 1 -v --log-level debug
expect_in "$WORK/err" "-v (--verbose) and --log-level both set the log level: give one"

# Counts and sizes: "1 step", "1 file", bytes in B or kB where a figure in MB would be 0.00.
expect_exit 0 "$FPGATHER" train --steps 1
expect_in "$WORK/out" "for 1 step on dp 2"
expect_exit 0 "$FPGATHER" inspect "$TESTDATA/models/tiny-llama.safetensors"
expect_in "$WORK/out" "safetensors, 1 file, "
expect_exit 0 "$FPGATHER" inspect "$CK/dp2-model"
grep -q "0.00 MB" "$WORK/out" && fail "inspect of a small checkpoint prints 0.00 MB: $(grep '0.00 MB' "$WORK/out")"
expect_in "$WORK/out" "kB logical, "
finish
