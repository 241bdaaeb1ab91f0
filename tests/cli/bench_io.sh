#!/usr/bin/env bash
# fpgather bench io on a tiny state: every measurement made --reps times (interleaved), medians and
# their ratios reported, in text and --json; the copying path (--copy) saves the same state; bad
# --reps refused.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress --threads 2)

expect_exit 0 "${F[@]}" --json bench io --dir "$WORK" --size-gib 0.01 --ranks 2 --reps 3
cp "$WORK/out" "$WORK/io.json"
python3 - "$WORK/io.json" <<'PY' || fail "bench io --json"
import json, statistics, sys
j = json.load(open(sys.argv[1]))
assert j["benchmark"] == "io" and j["reps"] == 3 and j["borrowed"] is True, j
rows = {r["what"]: r for r in j["results"]}
want = ["plain write+fsync", "plain read (cold)", "save none", "load none", "save zstd:1", "load zstd:1"]
assert list(rows) == want, list(rows)
for r in rows.values():
    assert len(r["rep_seconds"]) == 3, r
    assert abs(r["seconds"] - statistics.median(r["rep_seconds"])) < 1e-9, r
# Ratios come from the medians.
w, rd = rows["plain write+fsync"]["seconds"], rows["plain read (cold)"]["seconds"]
for name, base in (("save none", w), ("save zstd:1", w), ("load none", rd), ("load zstd:1", rd)):
    assert abs(rows[name]["ratio_to_plain"] - base / rows[name]["seconds"]) < 1e-9 * max(1, rows[name]["ratio_to_plain"]), name
for d in ("save", "load"):
    r = rows[d + " zstd:1"]
    assert abs(r["ratio_to_none"] - rows[d + " none"]["seconds"] / r["seconds"]) < 1e-9 * max(1, r["ratio_to_none"]), d
    assert "ratio_to_none" not in rows[d + " none"]
# Borrowed saves copy nothing into slots.
assert rows["save none"]["pipeline"]["copy_s"] == 0 and rows["save zstd:1"]["pipeline"]["copy_s"] == 0, rows
PY

expect_exit 0 "${F[@]}" bench io --dir "$WORK" --size-gib 0.01 --ranks 2 --reps 2 --copy --compress none
expect_in "$WORK/out" "median of 2 interleaved reps, saves copying (--copy)"
expect_in "$WORK/out" "(copy into slots "
expect_in "$WORK/out" "save none"

expect_exit 0 "${F[@]}" bench io --dir "$WORK" --size-gib 0.01 --ranks 2 --reps 1
expect_in "$WORK/out" "save zstd:1 / save none: "
expect_in "$WORK/out" "load zstd:1 / load none: "

expect_exit 2 "${F[@]}" bench io --dir "$WORK" --reps 0
finish
