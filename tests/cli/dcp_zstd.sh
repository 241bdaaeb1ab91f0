#!/usr/bin/env bash
# PyTorch DCP checkpoints saved through torch's ZStandard stream extension, and Hugging Face
# distributed shards (testdata/dcp/make_state_cases.py, torch 2.15): read as their uncompressed /
# .metadata counterparts (inspect, validate --data, diff, convert bitwise); truncated, corrupt and
# bomb streams, SAFETENSORS behind zstd and unknown transforms refused naming the file and the key,
# in bounded memory. The packed float4 pairs exported as safetensors F4.
source "$(dirname "$0")/common.sh"
D="$TESTDATA/dcp"
F=(timeout 60 "$FPGATHER" --no-progress)

# Whether two safetensors files hold the same tensors: names, dtypes, shapes and bytes (their
# __metadata__, which names the source, and their order aside).
same_tensors() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    print(a, b, sep="\n", file=sys.stderr)
sys.exit(0 if a == b else 1)
PY
}

# zstd: the same state as train_state/, every item compressed.
expect_exit 0 "${F[@]}" inspect "$D/zstd"
expect_in "$WORK/out" "torch_save items compressed with zstd (stream.zstd/1)"
expect_exit 0 "${F[@]}" --json inspect "$D/zstd"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["transforms"] == ["stream.zstd/1"]' "$WORK/out" ||
  fail "inspect --json: transforms"
expect_exit 0 "${F[@]}" validate --data "$D/zstd"
expect_in "$WORK/out" "valid: PyTorch DCP"
expect_in "$WORK/out" "0 problems"
expect_exit 0 "${F[@]}" diff "$D/zstd" "$D/train_state"
expect_in "$WORK/out" "equal: 39 keys"
expect_exit 0 "${F[@]}" inspect --key optim.param_groups.0.lr "$D/zstd"
expect_in "$WORK/out" "0.01"
for a in zstd train_state; do
  expect_exit 0 "${F[@]}" convert "$D/$a" "$WORK/$a.safetensors" --states --dtype fp32
  expect_exit 0 "${F[@]}" convert "$D/$a" "$WORK/$a.dcp" --to dcp --states --dtype fp32
done
same_tensors "$WORK/zstd.safetensors" "$WORK/train_state.safetensors" || fail "convert of zstd differs from train_state's"
for f in "$WORK/train_state.dcp"/*.distcp; do
  cmp -s "$f" "$WORK/zstd.dcp/$(basename "$f")" || fail "convert --to dcp of zstd: $(basename "$f") differs"
done
expect_exit 0 "${F[@]}" diff "$WORK/zstd.dcp" "$D/train_state"
expect_in "$WORK/out" "equal: 39 keys"

# Broken streams: exit 3 naming the file and the key (validate --data: a problem of the key).
expect_exit 3 "${F[@]}" convert "$D/zstd_truncated" "$WORK/t.safetensors"
expect_in "$WORK/err" "__0_"
expect_in "$WORK/err" "key 'model.0.weight'"
expect_in "$WORK/err" "the zstd stream is truncated"
expect_exit 1 "${F[@]}" validate --data "$D/zstd_truncated"
expect_in "$WORK/out" "model.0.weight"
expect_in "$WORK/out" "truncated"
expect_exit 0 "${F[@]}" validate "$D/zstd_truncated"
mkdir "$WORK/corrupt" && cp "$D/zstd"/.metadata "$D/zstd"/*.distcp "$WORK/corrupt/"
python3 - "$WORK/corrupt" <<'PY'
import os, sys
# Every frame of both files: a few bytes in the middle of its compressed blocks flipped.
for name in os.listdir(sys.argv[1]):
    if not name.endswith(".distcp"):
        continue
    path = os.path.join(sys.argv[1], name)
    b = bytearray(open(path, "rb").read())
    starts = [i for i in range(len(b) - 3) if b[i:i + 4] == b"\x28\xb5\x2f\xfd"] + [len(b)]
    for s, e in zip(starts, starts[1:]):
        for k in range(3):
            b[(s + e) // 2 + k] ^= 0xa5
    open(path, "wb").write(b)
PY
expect_exit 3 "${F[@]}" convert "$WORK/corrupt" "$WORK/c.safetensors" --states
expect_in "$WORK/err" "/corrupt/__0_"
expect_in "$WORK/err" "key '"
expect_exit 1 "${F[@]}" validate --data "$WORK/corrupt"
[ -e "$WORK/c.safetensors" ] && fail "a refused export left its output"
# A bomb (1 GiB of zeros in 32 kB for a chunk of 48 bytes): refused after 1 MiB, under a 1 GB cap
# (AddressSanitizer reserves terabytes of address space, so under scripts/sanitize.sh, ASAN_OPTIONS
# set, the cap is left off and the refusal's message is what shows the bound held).
cap=1000000
[ -n "${ASAN_OPTIONS:-}" ] && cap=unlimited
(ulimit -v "$cap"; exec "${F[@]}" convert "$D/zstd_bomb" "$WORK/b.safetensors" >"$WORK/out" 2>"$WORK/err")
rc=$?
[ "$rc" = 3 ] || fail "zstd bomb: exit $rc, expected 3: $(cat "$WORK/err")"
expect_in "$WORK/err" "key 'model.0.weight'"
expect_in "$WORK/err" "the zstd stream expands past the 1048624 bytes this item can hold"
expect_exit 0 "${F[@]}" validate "$D/zstd_unknown"
expect_in "$WORK/out" "1 item stored through stream transforms fpgather does not read ('stream.lz4/1')"
expect_exit 1 "${F[@]}" validate --data "$D/zstd_unknown"
expect_exit 3 "${F[@]}" convert "$D/zstd_unknown" "$WORK/u.safetensors"
expect_in "$WORK/err" "key 'model.0.weight'"
expect_in "$WORK/err" "'stream.lz4/1', which is not supported"
# SAFETENSORS behind zstd: torch writes empty streams for the tensors; refused, the bytes items read.
expect_exit 0 "${F[@]}" inspect "$D/zstd_safetensors"
expect_exit 3 "${F[@]}" convert "$D/zstd_safetensors" "$WORK/s.safetensors"
expect_in "$WORK/err" "is an empty zstd stream: torch's SAFETENSORS serialization with the ZStandard extension"
expect_exit 1 "${F[@]}" validate --data "$D/zstd_safetensors"
expect_exit 0 "${F[@]}" inspect --key optim.param_groups.0.lr "$D/zstd_safetensors"
expect_in "$WORK/out" "0.01"

# Hugging Face distributed shards: one checkpoint of the ranks' files.
H="$D/hf_distributed"
expect_exit 0 "${F[@]}" inspect --keys "$H"
expect_in "$WORK/out" "PyTorch DCP of Hugging Face distributed shards"
expect_in "$WORK/out" "Hugging Face distributed shards: 2 safetensors files placed by DCP_SHARDING_INFO, read as one"
expect_exit 0 "${F[@]}" --json inspect "$H"
python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); assert d["metadata_source"] == "hf_distributed" and len(d["metadata_files"]) == 2, d' \
  "$WORK/out" || fail "inspect --json: metadata_source"
expect_exit 0 "${F[@]}" validate --data "$H"
expect_in "$WORK/out" "valid: PyTorch DCP, 3 tensor keys, 5 chunks"
expect_exit 0 "${F[@]}" diff "$H" "$D/expected_hf_distributed.safetensors"
expect_in "$WORK/out" "equal: 3 keys"
expect_exit 0 "${F[@]}" convert "$H" "$WORK/hf.safetensors" --dtype fp32
expect_exit 0 "${F[@]}" convert "$H" "$WORK/hf.dcp" --to dcp --dtype fp32
expect_exit 0 "${F[@]}" diff "$WORK/hf.dcp" "$WORK/hf.safetensors"
expect_in "$WORK/out" "equal: 3 keys"
mkdir "$WORK/hf_gap" && cp "$H"/shard-00002-* "$WORK/hf_gap/"
expect_exit 3 "${F[@]}" inspect "$WORK/hf_gap"
expect_in "$WORK/err" "without shard 1: the save of that rank did not finish"

# The packed float4 pairs: F4 in a safetensors export, as safetensors itself writes them.
expect_exit 0 "${F[@]}" convert "$D/nvfp4" "$WORK/f4.safetensors" --dtype fp32
same_tensors "$WORK/f4.safetensors" "$D/expected_nvfp4.safetensors" || fail "F4 export differs from safetensors' own"
expect_exit 3 "${F[@]}" convert "$D/nvfp4" "$WORK/f4.dcp" --to dcp
expect_in "$WORK/err" "key 'nvfp4.packed' has dtype torch.float4_e2m1fn_x2, which fpgather cannot represent in a DCP export (a safetensors export writes it as F4)"
finish
