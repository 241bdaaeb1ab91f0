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

# optimizer_groups DIR: a Megatron checkpoint's optimizer groups as `inspect --json --layouts` reports
# them, one JSON line each without paths (its (tp, pp, dp) and per buffer dtype and bucket sizes), for
# comparing two checkpoints' layouts.
optimizer_groups() {
  "$FPGATHER" --no-progress --json inspect --layouts "$1" >"$WORK/groups.json" || return 1
  python3 - "$WORK/groups.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
def find(o):
    if isinstance(o, dict):
        if "groups" in o and isinstance(o["groups"], list):
            return o["groups"]
        for v in o.values():
            r = find(v)
            if r is not None:
                return r
    return None
for g in find(j) or []:
    print(json.dumps({k: g[k] for k in sorted(g) if k not in ("rank_files",)}, sort_keys=True))
PY
}

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "all checks passed"
}
