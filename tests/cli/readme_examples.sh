#!/usr/bin/env bash
# The README's ```console blocks, run in order on fresh data in an empty directory (testdata/ linked
# in, the built fpgather first on PATH), each command's output compared with what the block shows:
# integers exactly, other figures within 2%, times not at all (tests/cli/readme_examples.py).
source "$(dirname "$0")/common.sh"
: "${SRC:?SRC must name the source tree}"
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
mkdir -p "$WORK/bin" "$WORK/run"
ln -s "$FPGATHER" "$WORK/bin/fpgather"
ln -s "$TESTDATA" "$WORK/run/testdata"
PATH="$WORK/bin:$PATH" python3 "$SRC/tests/cli/readme_examples.py" "$SRC/README.md" "$WORK/run" ||
  fail "README examples differ from what the commands print"
finish
