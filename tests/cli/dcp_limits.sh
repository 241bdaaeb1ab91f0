#!/usr/bin/env bash
# Memory bounded by the files, not by what they claim (formats/dcp/FORMAT.md, "Memory"): each crafted
# DCP checkpoint of testdata/dcp/make_limit_cases.py ends with a clear message and exit 1 or 3 under
# an address-space limit of 1 GB, well below what each claim would take (10^9 chunks for the shared
# chunk list alone, over 100 GB). Also a bytes item that would stop Megatron (a refused global, an
# 8 GiB zero-stride tensor) stops reshard instead of being carried into the target.
source "$(dirname "$0")/common.sh"
: "${MAKE_DCP:?MAKE_DCP must name the make_dcp tool}"
C="$WORK/cases"
python3 "$TESTDATA/dcp/make_limit_cases.py" "$C" || { fail "make_limit_cases.py"; finish; }

# capped CODE CMD...: CMD under ulimit -v 1000000 (KiB) and a timeout, as expect_exit. AddressSanitizer
# reserves terabytes of address space, so under scripts/sanitize.sh (ASAN_OPTIONS set) the cap is left
# out and only the exit codes and messages are checked.
# The timeout catches a hang; an ASan build decoding a hostile pickle up to its work budget, beside
# other tests on two cores, has taken over 120 s.
cap=1000000 limit=120
[ -n "${ASAN_OPTIONS:-}" ] && cap=unlimited limit=400
capped() {
  local want=$1; shift
  expect_exit "$want" bash -c 'ulimit -v "$0" && exec timeout "$1" "${@:2}"' "$cap" "$limit" "$@"
}
F=("$FPGATHER" --no-progress)
budget="decoding takes more than the"

capped 3 "${F[@]}" validate "$C/shared_chunks"
expect_in "$WORK/err" "shared_chunks/.metadata: state_dict_metadata['k"
expect_in "$WORK/err" "'].chunks: $budget"
expect_in "$WORK/err" "(64 MiB + 16 bytes per byte of the file)"
capped 3 "${F[@]}" inspect "$C/shared_chunks"
expect_in "$WORK/err" "$budget"
capped 3 "${F[@]}" validate "$C/shared_size"
expect_in "$WORK/err" "shared_size/.metadata: state_dict_metadata['w'].chunks["
expect_in "$WORK/err" "$budget"
capped 3 "${F[@]}" validate "$C/shared_planner"
expect_in "$WORK/err" "shared_planner/.metadata: planner_data['k"
expect_in "$WORK/err" "$budget"
capped 3 "${F[@]}" validate "$C/set_of_memo"
expect_in "$WORK/err" "set_of_memo/.metadata: pickle at byte "
expect_in "$WORK/err" "$budget"
capped 3 "${F[@]}" validate "$C/exponential_dag"
expect_in "$WORK/err" "exponential_dag/.metadata: unfolding a value: $budget"
capped 3 "${F[@]}" validate "$C/sparse_metadata"
expect_in "$WORK/err" "sparse_metadata/.metadata: 3900000000 bytes (3.90 GB), larger than the 1073741824 accepted"
# Under the cap, a file of zeros is refused before it is read.
truncate -s 100000000 "$C/sparse_metadata/.metadata"
capped 3 "${F[@]}" validate "$C/sparse_metadata"
expect_in "$WORK/err" "not a pickle of protocol 2 to 5 (it starts with bytes 00 00)"

# A million chunks without storage: a problem each, ten listed and the rest counted.
capped 1 "${F[@]}" validate "$C/missing_storage"
expect_in "$WORK/out" "missing_file w [9, 10) -: chunk 9 [9:10] has no storage_data entry"
expect_in "$WORK/out" "missing_file w [10, 1000000) -: ... and 999990 more missing_file problems of this key"
[ "$(wc -l <"$WORK/out")" -le 12 ] || fail "validate of 10^6 missing chunks printed $(wc -l <"$WORK/out") lines"
capped 1 "${F[@]}" --json validate "$C/missing_storage"
python3 -c 'import json,sys; p=json.load(sys.stdin)["problems"]; assert len(p) == 11, len(p)' <"$WORK/out" \
  || fail "validate --json of 10^6 missing chunks: not 11 problems"

# A 1-element storage viewed with stride 0 as 2^29 and 2^34 elements.
for c in zero_stride zero_stride_2e34; do
  for data in "" --data; do
    capped 1 "${F[@]}" validate $data "$C/$c"
    expect_in "$WORK/out" "truncated_file w [0, "
    expect_in "$WORK/out" "its item of 61"
  done
  capped 1 "${F[@]}" diff "$C/$c" "$C/$c"
  expect_in "$WORK/err" "refusing to compare it"
  capped 1 "${F[@]}" convert "$C/$c" "$WORK/$c.safetensors"
  expect_in "$WORK/err" "refusing to export it"
  # Unvalidated, the view itself is refused before a buffer of its claimed size is made.
  capped 3 "${F[@]}" diff --no-validate "$C/$c" "$C/$c"
  expect_in "$WORK/err" "archive/data.pkl: tensor of size ["
  expect_in "$WORK/err" "and stride [0] views"
  expect_in "$WORK/err" "a tensor item may not repeat its storage's elements"
  capped 3 "${F[@]}" convert --no-validate "$C/$c" "$WORK/$c.safetensors"
  # The output is preallocated at its full size before anything is read: a disk without room for the
  # 32 GiB the 2^34 view claims refuses it there, as clearly.
  if grep -q "cannot preallocate .*No space left on device" "$WORK/err"; then
    [ $c = zero_stride_2e34 ] || fail "convert --no-validate $c: no room for its output"
  else
    expect_in "$WORK/err" "a tensor item may not repeat its storage's elements"
  fi
done
# The same view in an item as long as the 2 GiB it claims (a hole in the file): only the view is wrong.
capped 0 "${F[@]}" validate "$C/zero_stride_sparse"
capped 1 "${F[@]}" validate --data "$C/zero_stride_sparse"
expect_in "$WORK/out" "checksum w [0, 536870912) __0_0.distcp: chunk 0 [0:536870912]: "
expect_in "$WORK/out" "tensor of size [536870912] and stride [0] views 536870912 elements (2147483648 bytes) of a storage of 4 bytes"
for cmd in diff convert; do
  out="$C/zero_stride_sparse"; [ $cmd = convert ] && out="$WORK/sparse.safetensors"
  capped 3 "${F[@]}" $cmd "$C/zero_stride_sparse" "$out"
  expect_in "$WORK/err" "a tensor item may not repeat its storage's elements"
done

# Bytes items carried by reshard are decoded first.
M="$TESTDATA/megatron/dp1-one-bucket/ckpt"
K=module.decoder.layers.mlp.linear_fc1._extra_state/shard_0_2
python3 - "$WORK/os_system.pt" <<'PY' || fail "os_system.pt"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_STORED) as z:
    z.writestr("archive/data.pkl", b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00echoq\x01\x85q\x02Rq\x03.")
    z.writestr("archive/byteorder", b"little")
PY
for item in "$WORK/os_system.pt" "$C/zero_stride_object/object.pt"; do
  rm -rf "$WORK/src" "$WORK/dst"
  expect_exit 0 "$MAKE_DCP" copy "$M" "$WORK/src" --replace "$K" "$item"
  capped 3 "${F[@]}" reshard "$WORK/src" "$WORK/dst" --dp 2
  expect_in "$WORK/err" "bytes item '$K' cannot be carried into the resharded checkpoint"
  [ -e "$WORK/dst" ] && fail "a refused reshard left its output"
done
expect_in "$WORK/err" "tensors of the pickled object exceed"
finish
