#!/usr/bin/env bash
# Key names from a hostile file cannot forge output: a key holding a newline and an escape sequence,
# and one holding a lone surrogate (the three bytes ED A0 80 that Python's surrogatepass writes and
# the unpickler passes through), are shown escaped in the text of inspect --keys, validate and diff,
# and --json output is valid JSON for all three. The checkpoints come from formats/dcp's writer.
source "$(dirname "$0")/common.sh"
: "${MAKE_DCP:?MAKE_DCP must name the make_dcp tool}"
F=(timeout 60 "$FPGATHER" --no-progress)
forged=$'model.w\n\x1b[31mvalid: 0 problems'
lone=$'model.s\xed\xa0\x80'

A="$WORK/a"; B="$WORK/b"; L="$WORK/len0"
"$MAKE_DCP" tensors "$A" "$forged=4" "$lone=4" model.ok=4 || fail "make_dcp tensors"
"$MAKE_DCP" tensors "$B" "$forged=5" model.ok=4 || fail "make_dcp tensors"
"$MAKE_DCP" tensors "$L" "$forged=4" --item-length "$forged" 0 || fail "make_dcp tensors"

# No output line may hold a control byte or a byte that is not UTF-8, and no line may start with the
# forged text.
clean() {
  LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$1" && fail "$2: a control byte in the output"
  python3 -c 'import sys; sys.stdin.buffer.read().decode("utf-8")' <"$1" || fail "$2: output is not UTF-8"
  grep -q '^\[31mvalid' "$1" && fail "$2: a forged line"
  return 0
}
json_ok() {
  python3 -c 'import json,sys; json.load(sys.stdin)' <"$WORK/out" || fail "$1: --json output is not valid JSON"
}

expect_exit 0 "${F[@]}" inspect --keys "$A"
clean "$WORK/out" "inspect --keys"
expect_in "$WORK/out" 'model.w\n\x1b[31mvalid: 0 problems  float32'
expect_in "$WORK/out" 'model.s\ud800 '
expect_exit 0 "${F[@]}" --json inspect --keys "$A"
json_ok "inspect --keys"
python3 -c '
import json, sys
keys = [k["key"] for k in json.load(sys.stdin)["keys"]]
assert "model.w\n\x1b[31mvalid: 0 problems" in keys, keys
assert "model.s\ufffd\ufffd\ufffd" in keys, keys
' <"$WORK/out" || fail "inspect --json: the keys as JSON strings (invalid bytes as U+FFFD)"
expect_exit 0 "${F[@]}" inspect --key "$lone" "$A"
clean "$WORK/out" "inspect --key"
expect_in "$WORK/out" 'model.s\ud800: float32 [4]'
expect_exit 0 "${F[@]}" --json inspect --key "$lone" "$A"
json_ok "inspect --key"

expect_exit 0 "${F[@]}" validate "$A"
clean "$WORK/out" "validate"
expect_exit 0 "${F[@]}" --json validate "$A"
json_ok "validate"
expect_exit 1 "${F[@]}" validate "$L"
clean "$WORK/out" "validate (a problem)"
expect_in "$WORK/out" 'truncated_file model.w\n\x1b[31mvalid: 0 problems [0, 4)'
expect_exit 1 "${F[@]}" --json validate "$L"
json_ok "validate (a problem)"

expect_exit 1 "${F[@]}" diff "$A" "$B"
clean "$WORK/out" "diff"
expect_in "$WORK/out" 's\ud800: only in A'
expect_in "$WORK/out" 'w\n\x1b[31mvalid: 0 problems: shape: [4] vs [5]'
expect_exit 1 "${F[@]}" --json diff "$A" "$B"
json_ok "diff"
# An error quoting the key: the comparison is refused for the invalid checkpoint.
expect_exit 1 "${F[@]}" diff "$L" "$A"
clean "$WORK/err" "diff (refused)"
expect_in "$WORK/err" 'model.w\n\x1b[31mvalid: 0 problems'
finish
