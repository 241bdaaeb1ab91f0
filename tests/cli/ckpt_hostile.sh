#!/usr/bin/env bash
# Hostile checkpoints: the crafted fixtures of testdata/ckpt/broken (tests/tools/hostile_ckpt.h) and
# the same edits of a fresh `train` checkpoint. Every command refuses them with its exit code and a
# message naming the object; none crashes, hangs (each runs under `timeout`) or shows anything of
# the files outside the checkpoint, which hold OUTSIDE-SECRET where a reader following the
# reference would show it. FIFOs and symbolic links where a checkpoint or a safetensors model has
# regular files are refused before anything opens them.
source "$(dirname "$0")/common.sh"
: "${MAKE_CKPT_FIXTURES:?MAKE_CKPT_FIXTURES must name the fixture tool}"
F=(timeout 60 "$FPGATHER" --no-progress)
CK="$TESTDATA/ckpt/broken"
VALID="$TESTDATA/ckpt/valid/dp2-bucket"

# refused CODE TEXT CMD...: exit CODE, TEXT on stderr (unless ""), nothing from outside on stdout
# or stderr.
refused() {
  local code=$1 text=$2
  shift 2
  expect_exit "$code" "$@"
  [ -z "$text" ] || expect_in "$WORK/err" "$text"
  if grep -qF OUTSIDE-SECRET "$WORK/out" "$WORK/err"; then fail "shows what an outside file holds: $*"; fi
}

# Every reader of the index refuses a reference out of the checkpoint (exit 3), naming it.
declare -A OBJECT=(
  [external-link-document]="index.h5: /documents/model is an HDF5 external link"
  [external-storage-names]="index.h5: /names keeps its data in external files (HDF5 external storage)"
  [virtual-names]="index.h5: /names is an HDF5 virtual dataset"
  [document-array]="index.h5: /documents/model is not a single string"
  [huge-table]="index.h5: table /chunks declares 1099511627776 records of 40 bytes but stores 0 bytes"
)
for kind in "${!OBJECT[@]}"; do
  dir="$CK/$kind"
  for cmd in "validate" "validate --data" "inspect" "inspect --keys" "inspect --json"; do
    read -r -a c <<<"$cmd"
    refused 3 "$dir/${OBJECT[$kind]}" "${F[@]}" "${c[@]}" "$dir"
  done
  refused 3 "${OBJECT[$kind]}" "${F[@]}" diff "$dir" "$VALID"
  refused 3 "${OBJECT[$kind]}" "${F[@]}" convert "$dir" "$WORK/$kind.safetensors"
  refused 3 "${OBJECT[$kind]}" "${F[@]}" convert "$dir" "$WORK/$kind-recompressed" --compress none
  refused 3 "${OBJECT[$kind]}" "${F[@]}" reshard "$dir" "$WORK/$kind-resharded" --dp 4
  [ ! -e "$WORK/$kind-recompressed" ] && [ ! -e "$WORK/$kind-resharded" ] || fail "$kind: an output was left"
done

# A run naming no file: validation reports it (the golden diagnostic is checked by validate.sh) and
# the commands that validate first refuse it; readers that reach it (--no-validate) say so instead
# of crashing.
dir="$CK/run-file-out-of-range"
refused 1 "" "${F[@]}" validate "$dir"
expect_in "$WORK/out" "run 0 names file #4294967295, which is not in the file table"
refused 1 "refusing to compare it" "${F[@]}" diff "$dir" "$VALID"
# (which chunk of the run is reported first depends on the threads)
refused 3 "run-file-out-of-range: key 'optimizer/buffer0/bucket0/master' [" "${F[@]}" diff --no-validate "$dir" "$VALID"
expect_in "$WORK/err" "): run names no file"
refused 3 "run-file-out-of-range: key 'optimizer/buffer0/bucket0/master' [" \
  "${F[@]}" convert --no-validate --states "$dir" "$WORK/rfo.safetensors"
expect_in "$WORK/err" "): run names no file"
refused 0 "" "${F[@]}" inspect --key optimizer/buffer0/bucket0/master "$dir"
refused 0 "" "${F[@]}" inspect --json --key optimizer/buffer0/bucket0/master "$dir"
refused 1 "refusing to rewrite it" "${F[@]}" convert "$dir" "$WORK/rfo" --compress none
refused 1 "refusing to reshard it" "${F[@]}" reshard "$dir" "$WORK/rfo-resharded" --dp 4

# A data file's dataset as an external link: never followed.
dir="$CK/rank-file-external-link"
ext="dataset /0 is an HDF5 external link"
refused 1 "" "${F[@]}" validate --data "$dir"
expect_in "$WORK/out" "rank-00000.h5: $ext"
refused 3 "rank-00000.h5: key 'optimizer/buffer0/bucket0/master' [" "${F[@]}" diff "$dir" "$VALID"
expect_in "$WORK/err" "$ext"
refused 3 "rank-00000.h5: key 'optimizer/buffer0/bucket0/master' [" "${F[@]}" convert "$dir" "$WORK/rfl" --compress none
expect_in "$WORK/err" "$ext"

# The same edits of a training checkpoint: `train --load` refuses each (exit 3), naming it.
expect_exit 0 "${F[@]}" train --steps 2 --save "$WORK/run"
mkdir -p "$WORK/outside"
declare -A LOAD=(
  [run-file-out-of-range]="run 0 names file #4294967295, which is not in the file table"
  [external-link-document]="index.h5: /documents/model is an HDF5 external link"
  [external-storage-names]="index.h5: /names keeps its data in external files"
  [virtual-names]="index.h5: /names is an HDF5 virtual dataset"
  [rank-file-external-link]="rank-00000.h5: key 'optimizer/output.weight/master' [0, 1920): dataset /0 is an HDF5 external link"
  [document-array]="index.h5: /documents/model is not a single string"
  [huge-table]="index.h5: table /chunks declares 1099511627776 records"
)
for kind in "${!LOAD[@]}"; do
  rm -rf "$WORK/$kind"
  cp -r "$WORK/run" "$WORK/$kind"
  "$MAKE_CKPT_FIXTURES" --hostile "$kind" "$WORK/$kind" "$WORK/outside" || fail "cannot make $kind"
  code=3
  [ "$kind" = run-file-out-of-range ] && code=1  # refused by the validation before use
  refused "$code" "${LOAD[$kind]}" "${F[@]}" train --steps 3 --load "$WORK/$kind"
  refused "$code" "${LOAD[$kind]}" "${F[@]}" train --steps 3 --load "$WORK/$kind" --save "$WORK/$kind"
  [ "$(ls "$WORK/$kind")" = "$(printf 'latest\nstep-00000002')" ] || fail "$kind: the failed resume left $(ls -A "$WORK/$kind")"
done

# FIFOs where a regular file belongs are refused before they are opened (opening one blocks).
fifo_ckpt() {  # fifo_ckpt NAME FILE: a copy of the training checkpoint with FILE a FIFO
  rm -rf "$WORK/$1"
  cp -r "$WORK/run/step-00000002" "$WORK/$1"
  rm "$WORK/$1/$2"
  mkfifo "$WORK/$1/$2"
}
fifo_ckpt fifo-index index.h5
for cmd in "validate" "inspect" "diff $WORK/run"; do
  read -r -a c <<<"$cmd"
  refused 3 "fifo-index/index.h5: not a regular file (a FIFO)" "${F[@]}" "${c[@]}" "$WORK/fifo-index"
done
refused 3 "fifo-index/index.h5: not a regular file (a FIFO)" "${F[@]}" train --steps 3 --load "$WORK/fifo-index"
fifo_ckpt fifo-rank rank-00001.h5
refused 1 "" "${F[@]}" validate --data "$WORK/fifo-rank"
expect_in "$WORK/out" "rank-00001.h5: data file is not a regular file"
refused 1 "rank-00001.h5: data file is not a regular file" "${F[@]}" train --steps 3 --load "$WORK/fifo-rank"
refused 3 "fifo-rank/rank-00001.h5: key '" "${F[@]}" diff --no-validate "$WORK/fifo-rank" "$WORK/run"
expect_in "$WORK/err" "not a regular file (a FIFO)"
# An external link whose target is a FIFO: the link is refused, the FIFO never opened.
rm -rf "$WORK/fifo-link"
cp -r "$WORK/run" "$WORK/fifo-link"
"$MAKE_CKPT_FIXTURES" --hostile external-link-document "$WORK/fifo-link" "$WORK/outside" || fail "cannot make fifo-link"
rm "$WORK/outside/secret.h5"
mkfifo "$WORK/outside/secret.h5"
refused 3 "/documents/model is an HDF5 external link" "${F[@]}" validate "$WORK/fifo-link"
refused 3 "/documents/model is an HDF5 external link" "${F[@]}" train --steps 3 --load "$WORK/fifo-link"
# `latest` as a FIFO.
mkdir -p "$WORK/fifo-root"
mkfifo "$WORK/fifo-root/latest"
refused 3 "fifo-root/latest: not a regular file" "${F[@]}" validate "$WORK/fifo-root"

# Symbolic links where the format says regular files: a data file linked from outside is not read.
rm -rf "$WORK/link-rank"
cp -r "$WORK/run/step-00000002" "$WORK/link-rank"
mv "$WORK/link-rank/rank-00001.h5" "$WORK/outside/rank-00001.h5"
ln -s "$WORK/outside/rank-00001.h5" "$WORK/link-rank/rank-00001.h5"
refused 1 "" "${F[@]}" validate --data "$WORK/link-rank"
expect_in "$WORK/out" "rank-00001.h5: data file is not a regular file"
refused 1 "rank-00001.h5: data file is not a regular file" "${F[@]}" train --steps 3 --load "$WORK/link-rank"
refused 3 "link-rank/rank-00001.h5: key '" "${F[@]}" diff --no-validate "$WORK/link-rank" "$WORK/run"
expect_in "$WORK/err" "not a regular file (a symbolic link)"

# Safetensors: a FIFO is refused, not opened; a symbolic link to a model file is followed (caches).
mkfifo "$WORK/model.safetensors"
refused 3 "model.safetensors: not a regular file (a FIFO)" "${F[@]}" convert "$WORK/model.safetensors" \
  "$WORK/fp8.safetensors" --fp8 tensorwise
ln -s "$TESTDATA/safetensors/reference_all_dtypes.safetensors" "$WORK/linked.safetensors"
expect_exit 0 "${F[@]}" inspect "$WORK/linked.safetensors"
finish
