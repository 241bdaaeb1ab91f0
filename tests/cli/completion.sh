#!/usr/bin/env bash
# `fpgather completion bash|zsh`: the scripts complete every subcommand and option that --help lists
# (they are generated from the same definition), skip option values when finding the subcommand,
# complete the values of options that take one of a fixed set, and file names for other positional
# arguments and option values; the build's installed copies are
# the binary's own output. zsh is driven on a pseudo-terminal (zpty) where it is installed.
source "$(dirname "$0")/common.sh"
cd "$WORK" || exit 1
touch model-a.safetensors model-b.safetensors

expect_exit 0 "$FPGATHER" completion bash
cp "$WORK/out" fpgather.bash
bash -n fpgather.bash || fail "the bash script does not parse"
mkdir zfuncs
expect_exit 0 "$FPGATHER" completion zsh
cp "$WORK/out" zfuncs/_fpgather
head -1 zfuncs/_fpgather | grep -qx '#compdef fpgather' || fail "the zsh script lacks #compdef"
expect_exit 2 "$FPGATHER" completion fish
expect_in "$WORK/err" "SHELL must be bash or zsh"
if [ -n "${BUILD:-}" ] && [ -d "$BUILD/completions" ]; then  # what the build generated and installs
  cmp -s fpgather.bash "$BUILD/completions/fpgather" || fail "build/completions/fpgather is stale"
  cmp -s zfuncs/_fpgather "$BUILD/completions/_fpgather" || fail "build/completions/_fpgather is stale"
fi

# bash_complete WORDS...: what bash offers for the last word, sorted, on one line.
bash_complete() {
  bash -c 'source ./fpgather.bash; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _fpgather
           printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' _ "$@"
}
# expect_offer SHELL WANT WORDS...: SHELL offers exactly WANT (space-separated, sorted) for WORDS.
expect_offer() {
  local shell=$1 want=$2 got
  shift 2
  if [ "$shell" = bash ]; then got=$(bash_complete "$@"); else got=$(zsh_complete "$@"); fi
  [ "${got% }" = "$want" ] || fail "$shell: '$*' offers '${got% }', want '$want'"
}

# The subcommands and options that --help lists for COMMAND... (one a line, sorted).
help_subcommands() { "$FPGATHER" "$@" --help | sed -n '/^Subcommands:/,$p' | sed -n 's/^  \([a-z][a-z0-9-]*\) .*/\1/p' | sort; }
help_options() {
  "$FPGATHER" "$@" --help | sed -n '/^Options:/,/^$/p' | grep -oE '^ +-[-a-z0-9,]+' | tr ',' '\n' | tr -d ' ' | sort -u
}

checks() {
  local shell=$1
  expect_offer "$shell" "$(help_subcommands | tr '\n' ' ' | sed 's/ $//')" fpgather ""
  expect_offer "$shell" "$(help_subcommands bench | tr '\n' ' ' | sed 's/ $//')" fpgather bench ""
  expect_offer "$shell" "train" fpgather tr
  expect_offer "$shell" "inspect" fpgather --json in
  expect_offer "$shell" "bench" fpgather --threads 4 be          # 4 is --threads' value, not a command
  expect_offer "$shell" "quantize" fpgather bench --json qu
  expect_offer "$shell" "--steps" fpgather train --st
  expect_offer "$shell" "--no-nesterov --no-progress" fpgather train --model tiny --no
  expect_offer "$shell" "--json" fpgather inspect model-a.safetensors --js   # global options after the subcommand
  expect_offer "$shell" "--rows" fpgather bench quantize --ro
  expect_offer "$shell" "model-a.safetensors model-b.safetensors" fpgather inspect model-
  expect_offer "$shell" "model-a.safetensors model-b.safetensors" fpgather convert --fp8 blockwise model-
  expect_offer "$shell" "model-a.safetensors model-b.safetensors" fpgather train --init model-
  # An option that takes one of a fixed set: its values, never file names.
  expect_offer "$shell" "adam adamw" fpgather train --optimizer ad
  expect_offer "$shell" "adam adamw lion muon" fpgather step --optimizer ""
  expect_offer "$shell" "blockwise blockwise-1x128" fpgather train --fp8 bl
  expect_offer "$shell" "dcp" fpgather convert model-a.safetensors out --to d
  expect_offer "$shell" "dp_reshardable" fpgather reshard --to dp
  expect_offer "$shell" "debug" fpgather --log-level de
  expect_offer "$shell" "bash zsh" fpgather completion ""
  expect_offer "$shell" "train" fpgather help tr
  # Every option --help lists, for every subcommand, is offered.
  local sub want got
  for sub in "" train step convert inspect validate diff reshard completion help "bench quantize" "bench io" "bench step"; do
    read -r -a argv <<<"$sub"
    want=$(help_options "${argv[@]}" | grep -- '^--' | tr '\n' ' ')
    if [ "$shell" = bash ]; then got=$(bash_complete fpgather "${argv[@]}" --); else got=$(zsh_complete fpgather "${argv[@]}" --); fi
    for opt in $want; do
      [[ " $got " == *" $opt "* ]] || fail "$shell: 'fpgather $sub --' does not offer $opt"
    done
  done
}
checks bash

# zsh_complete WORDS...: what zsh offers after typing WORDS and Tab on a pseudo-terminal, with the
# generated _fpgather on $fpath. compadd is wrapped to print each match; the markers are spelled split
# in what is typed, so that the terminal's echo of the typing is never taken for them.
zsh_complete() {
  timeout 30 zsh -f -c '
    zmodload zsh/zpty || exit 77
    zpty z zsh -f -i
    zpty -w z "PROMPT=; fpath=(zfuncs \$fpath); autoload -U compinit; compinit -u -D"
    zpty -w z "zstyle \":completion:*\" insert-tab false; bindkey \"^I\" complete-word"
    zpty -w z '\''compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi; local -a hits; builtin compadd -A hits "$@"; print -rl -- "@""@"${^hits}; }'\''
    zpty -w z '\''compprefuncs=(_b); comppostfuncs=(_e); _b() { print -r "@""@BEGIN"; }; _e() { print -r "@""@END"; exit; }'\''
    zpty -w z "$*"$'\''\t'\''
    local line started=
    while zpty -r -t z line || { sleep 0.05; zpty -r z line; }; do
      line=${line//$'\''\r'\''/}; line=${line%$'\''\n'\''}
      case $line in
        *@@END*) break ;;
        *@@BEGIN*) started=1 ;;
        *@@*) [[ -n $started ]] && print -r -- ${line#*@@} ;;
      esac
    done
    zpty -d z' _ "$@" | sort -u | tr '\n' ' '
}
if command -v zsh >/dev/null; then
  zsh -n zfuncs/_fpgather || fail "the zsh script does not parse"
  checks zsh
else
  echo "zsh is not installed: the zsh checks are skipped (scripts/setup-deps.sh installs it)"
fi
finish
