#!/usr/bin/env bash
# Regenerates the checkpoint fixtures in this directory and the expected `fpgather validate` output of
# each broken one (expected/NAME.txt: the problem lines, without the summary line).
#   testdata/ckpt/make_fixtures.sh [BUILD_DIR]      (default build/; needs the fpgather binary and
#                                                    tests/fpgather_make_ckpt_fixtures built there)
# The fixtures are written by a small C++ program over the public API (tests/tools/); golden-v*/ is
# written only when absent and then kept forever: future readers must still read it. Review the
# diff of expected/ before committing: it is the golden record of each diagnostic.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
"$build/tests/fpgather_make_ckpt_fixtures" "$here"
mkdir -p "$here/expected"
for dir in "$here"/broken/*/; do
  name=$(basename "$dir")
  args=(validate)
  case $name in flipped-bit | swapped-keys | moved-chunk | rank-file-external-link) args+=(--data) ;; esac  # defects only data reveals
  set +e
  "$build/fpgather" --no-progress "${args[@]}" "$dir" >"$here/expected/$name.out"
  code=$?
  set -e
  { echo "exit $code"; sed '$d' "$here/expected/$name.out"; } >"$here/expected/$name.txt"
  rm "$here/expected/$name.out"
done
echo "expected diagnostics written to $here/expected"
