#!/usr/bin/env bash
# fpgather validate on the checkpoint fixtures (testdata/ckpt, made by make_fixtures.sh): the valid
# ones (the golden checkpoint of every shipped version included) pass with --data; each broken one
# gives exactly its expected diagnostic lines and exit code.
source "$(dirname "$0")/common.sh"
CK="$TESTDATA/ckpt"
F=("$FPGATHER" --no-progress)

for dir in "$CK"/golden-v*/ "$CK"/valid/*/; do
  expect_exit 0 "${F[@]}" validate --data "$dir"
  expect_in "$WORK/out" ": valid: format "
done
# A root holding `latest` stands for the checkpoint it names.
expect_exit 0 "${F[@]}" validate "$CK/valid/run"
expect_in "$WORK/out" "step-00000007: valid"
expect_in "$WORK/out" "layout checked"

for exp in "$CK"/expected/*.txt; do
  name=$(basename "$exp" .txt)
  args=(validate)
  case $name in flipped-bit | swapped-keys | moved-chunk | rank-file-external-link) args+=(--data) ;; esac  # defects only data reveals
  "${F[@]}" "${args[@]}" "$CK/broken/$name" >"$WORK/out" 2>"$WORK/err"
  code=$?
  { echo "exit $code"; sed '$d' "$WORK/out"; } >"$WORK/got"
  if ! cmp -s "$exp" "$WORK/got"; then
    fail "validate $name differs from expected/$name.txt"
    diff "$exp" "$WORK/got" | head -10 >&2
  fi
done
# The flipped bit is invisible without --data, by design (index-only checks).
expect_exit 0 "${F[@]}" validate "$CK/broken/flipped-bit"

# --json: the same problems as data.
expect_exit 1 "${F[@]}" validate --json "$CK/broken/gap"
expect_in "$WORK/out" '"kind": "gap"'
expect_in "$WORK/out" '"lo": 128'
expect_in "$WORK/out" '"hi": 160'
expect_exit 1 "${F[@]}" validate --json "$CK/broken/edited-document"
expect_in "$WORK/out" '"kind": "index_checksum"'
expect_in "$WORK/out" '"index_checksum": "mismatch"'
expect_exit 0 "${F[@]}" validate --json "$CK/golden-v2.0"
expect_in "$WORK/out" '"index_checksum": "verified"'
expect_in "$WORK/out" '"chunk_checksums_bound": true'
# Format 1.0 still validates, with a note on what it cannot detect.
expect_exit 0 "${F[@]}" validate --data "$CK/golden-v1.0"
expect_in "$WORK/out" "note: format 1.0: no index checksum, chunk checksums not bound to key and offset"
expect_exit 0 "${F[@]}" validate --json "$CK/golden-v1.0"
expect_in "$WORK/out" '"index_checksum": "absent"'
expect_in "$WORK/out" '"chunk_checksums_bound": false'
# Swapped key names and moved chunks pass the index checks: only --data sees them (expected/ above).
expect_exit 0 "${F[@]}" validate "$CK/broken/swapped-keys"
expect_exit 0 "${F[@]}" validate "$CK/broken/moved-chunk"
expect_exit 3 "${F[@]}" --json validate "$CK/broken/newer-version"
expect_in "$WORK/out" '"kind": "version"'
expect_in "$WORK/out" '"readable": false'

# Unreadable: no index, a corrupt index.
mkdir -p "$WORK/empty"
expect_exit 3 "${F[@]}" validate "$WORK/empty"
expect_in "$WORK/err" "no index.h5"
mkdir -p "$WORK/corrupt"
echo "not hdf5" >"$WORK/corrupt/index.h5"
expect_exit 3 "${F[@]}" validate "$WORK/corrupt"
expect_in "$WORK/err" "not an HDF5 file"
finish
