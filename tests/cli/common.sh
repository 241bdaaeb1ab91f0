# Helpers sourced by the CLI tests. The environment gives FPGATHER (the binary), TESTDATA and SRC.
set -uo pipefail
: "${FPGATHER:?FPGATHER must name the fpgather binary}"
: "${TESTDATA:?TESTDATA must name testdata/}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fpgather-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect_exit CODE CMD...: runs CMD, keeps stdout/stderr in $WORK/out and $WORK/err.
expect_exit() {
  local want=$1; shift
  "$@" >"$WORK/out" 2>"$WORK/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "exit $got, want $want: $*"
    sed 's/^/    stderr: /' "$WORK/err" | head -5 >&2
  fi
}

# expect_in FILE TEXT: FILE contains TEXT (fixed string).
expect_in() {
  grep -qF -- "$2" "$1" || { fail "$(basename "$1") lacks '$2'"; sed 's/^/    /' "$1" | head -5 >&2; }
}

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "all checks passed"
}
