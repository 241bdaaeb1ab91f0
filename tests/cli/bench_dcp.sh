#!/usr/bin/env bash
# fpgather bench dcp-make and bench dcp on tiny checkpoints: the synthetic checkpoint is a valid DCP
# checkpoint whose export holds the documented values, key by key; bench dcp reports every phase with
# its repetitions, medians and peak RSS in --json and text, leaves no export behind, and refuses bad
# options and non-checkpoints.
source "$(dirname "$0")/common.sh"
F=(timeout 120 "$FPGATHER" --no-progress --threads 2)

# 203 chunks of 4 fp32 over 7 keys (2-D and 1-D) and 3 rank files.
expect_exit 0 "${F[@]}" bench dcp-make "$WORK/ck" --chunks 203 --keys 7 --ranks 3
expect_in "$WORK/out" "203 chunks of 16 bytes over 7 keys and 3 rank files"
expect_exit 0 "${F[@]}" validate --data "$WORK/ck"
expect_in "$WORK/out" "valid: PyTorch DCP"
[ "$(ls "$WORK/ck" | grep -c '\.distcp$')" = 3 ] || fail "dcp-make: not 3 rank files"

# Chunks of 2048 fp32 (two rows of 1024 in the 2-D key), reported as JSON.
expect_exit 0 "${F[@]}" --json bench dcp-make "$WORK/big" --chunks 6 --keys 2 --ranks 2 --chunk-bytes 8192
python3 - "$WORK/out" <<'PY' || fail "bench dcp-make --json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["benchmark"] == "dcp-make" and j["chunks"] == 6 and j["keys"] == 2 and j["ranks"] == 2, j
assert j["tensor_bytes"] == 6 * 8192 and j["file_bytes"] > j["tensor_bytes"] + j["metadata_bytes"], j
PY

# The export holds element i of key k = (i + 7919 k) mod 2^24, in each key's shape.
expect_exit 0 "${F[@]}" convert "$WORK/ck" "$WORK/ck.safetensors" --dtype fp32
expect_exit 0 "${F[@]}" convert "$WORK/big" "$WORK/big.safetensors" --dtype fp32
python3 - "$WORK/ck.safetensors" 203 7 4 "$WORK/big.safetensors" 6 2 2048 <<'PY' || fail "dcp-make values"
import array, json, struct, sys
def check(path, chunks, keys, elems):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    body = data[8 + n:]
    names = sorted(k for k in head if k != "__metadata__")
    assert len(names) == keys, names
    cols = 1
    while cols < 1024 and elems % (2 * cols) == 0:
        cols *= 2
    for k in range(keys):
        per_key = chunks // keys + (1 if k < chunks % keys else 0)
        name = f"layers.{k}." + ("weight" if k % 2 == 0 else "bias")
        t = head[name]
        want = [per_key * elems // cols, cols] if k % 2 == 0 else [per_key * elems]
        assert t["dtype"] == "F32" and t["shape"] == want, (name, t, want)
        a, b = t["data_offsets"]
        v = array.array("f")
        v.frombytes(body[a:b])
        assert list(v) == [float((i + 7919 * k) % (1 << 24)) for i in range(per_key * elems)], name
check(*sys.argv[1:2], *map(int, sys.argv[2:5]))
check(sys.argv[5], *map(int, sys.argv[6:9]))
PY

# bench dcp: three timed phases, medians of the reps, peaks, an export of every byte, nothing left.
mkdir "$WORK/exports"
expect_exit 0 "${F[@]}" --json bench dcp "$WORK/ck" --reps 3 --export-reps 2 --export-dir "$WORK/exports"
cp "$WORK/out" "$WORK/bench.json"
python3 - "$WORK/bench.json" <<'PY' || fail "bench dcp --json"
import json, statistics, sys
j = json.load(open(sys.argv[1]))
assert j["benchmark"] == "dcp" and j["chunks"] == 203 and j["keys"] == 7 and j["tensors"] == 7, j
assert j["storage_entries"] == 203 and j["files"] == 3 and j["problems"] == 0, j
for phase, reps in (("open", 3), ("validate", 3)):
    p = j[phase]
    assert len(p["rep_seconds"]) == reps and len(p["rep_cpu_seconds"]) == reps, p
    assert abs(p["median_s"] - statistics.median(p["rep_seconds"])) < 1e-12, p
    assert p["best_s"] == min(p["rep_seconds"]) and p["peak_rss"] >= p["rss_before"] > 0, p
e = j["export"]
assert e["cold"] is True and e["tensors"] == 7 and e["bytes_read"] == 203 * 16 == e["bytes_written"], e
assert len(e["timing"]["rep_seconds"]) == 2 and e["read_gbps"] > 0, e
assert j["metadata_bytes"] > 0 and j["metadata_resident_bytes_per_chunk"] >= 0, j
PY
[ -z "$(ls -A "$WORK/exports")" ] || fail "bench dcp left its export behind: $(ls "$WORK/exports")"

expect_exit 0 "${F[@]}" bench dcp "$WORK/big" --reps 2 --warm --export-dir "$WORK/exports"
for line in "open (.metadata decode)" "validate (index only)" "export fp32 (warm cache)" "validation problems: 0" \
  "export: 2 tensors, 0.000 GB read"; do
  expect_in "$WORK/out" "$line"
done
expect_exit 0 "${F[@]}" bench dcp "$WORK/big" --reps 1 --export-reps 0
grep -q "^export" "$WORK/out" && fail "bench dcp --export-reps 0 exported"

expect_exit 2 "${F[@]}" bench dcp-make "$WORK/x" --chunks 3 --keys 4
expect_in "$WORK/err" "--keys 4 is more than --chunks 3"
expect_exit 2 "${F[@]}" bench dcp-make "$WORK/x" --chunks 3 --chunk-bytes 6
expect_exit 2 "${F[@]}" bench dcp-make "$WORK/ck" --chunks 3
expect_exit 2 "${F[@]}" bench dcp "$WORK/ck" --reps 0
expect_exit 3 "${F[@]}" bench dcp "$WORK/exports"
expect_in "$WORK/err" "not a PyTorch DCP checkpoint"
finish
