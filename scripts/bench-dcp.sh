#!/usr/bin/env bash
# DCP benchmarks of BENCHMARKS.md ("DCP / Megatron checkpoints"), every ratio measured in this one run:
#
#  1. metadata: synthetic DCP checkpoints of $META_CHUNKS chunks (tiny chunks, 1000 keys, 8 ranks) made
#     by `fpgather bench dcp-make`; `fpgather bench dcp` times the .metadata decode, the index-only
#     validate and the fp32 export of each, with each phase's peak RSS; scripts/bench_dcp_torch.py
#     times torch on the same files (FileSystemReader.read_metadata, _validate_global_plan); the
#     ratios are torch's median over ours. Then the commands as a user runs them, a fresh process each
#     time (warm page cache, --threads 1, pinned to one core where taskset is): `fpgather inspect` and
#     index-only `fpgather validate`, against torch's read_metadata (what any look at a DCP checkpoint
#     from torch starts with) and read_metadata + _validate_global_plan.
#  2. export: checkpoints of $EXPORT_GB GB in $CHUNK_MIB MiB chunks (keys of 16 chunks, 8 ranks). $ROUNDS
#     rounds, each: the page cache dropped, a plain file of the export's size read with dd (a file
#     written in one go); dropped again, the checkpoint's data files read in file order (the same bytes
#     as the checkpoint lays them out: the disk's cold-read rate of these bytes, the export's target
#     reference, since a checkpoint's ranks write their files at once and they interleave on disk);
#     dropped again, the export (`bench dcp --export-reps 1`, written to $EXPORT_OUT, tmpfs by default,
#     so that the disk only reads). Medians over the rounds, and the
#     export's rate over each baseline; the export's peak RSS at each size.
#
# Usage: scripts/bench-dcp.sh [WORK_DIR]   (default /tmp/fpgather-bench-dcp, removed at the end)
# Environment: FPGATHER (default build/fpgather), PYTHON with torch (default python3; the torch figures
# are left out when it has none), META_CHUNKS ("100000 1000000"), EXPORT_GB ("0.5 2"), CHUNK_MIB (8),
# REPS (metadata and validate repetitions, 3), ROUNDS (5), EXPORT_OUT (/dev/shm), RESULTS (where the
# figures go as JSON, default ./bench-dcp-results.json), KEEP=1 keeps WORK_DIR.
# Dropping the page cache needs root (/proc/sys/vm/drop_caches); otherwise each file is evicted with
# `dd iflag=nocache`.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
FPGATHER=${FPGATHER:-$SRC/build/fpgather}
PYTHON=${PYTHON:-python3}
META_CHUNKS=${META_CHUNKS:-"100000 1000000"}
EXPORT_GB=${EXPORT_GB:-"0.5 2"}
CHUNK_MIB=${CHUNK_MIB:-8}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-5}
EXPORT_OUT=${EXPORT_OUT:-/dev/shm}
WORK=${1:-/tmp/fpgather-bench-dcp}
RESULTS=${RESULTS:-$PWD/bench-dcp-results.json}

[ -x "$FPGATHER" ] || { echo "no fpgather binary at $FPGATHER (set FPGATHER)" >&2; exit 2; }
[ -e "$WORK" ] && { echo "$WORK exists; give another WORK_DIR" >&2; exit 2; }
mkdir -p "$WORK/results" "$EXPORT_OUT/fpgather-bench-dcp-$$"
OUT="$EXPORT_OUT/fpgather-bench-dcp-$$"
cleanup() {
  rm -rf "$OUT"
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
R="$WORK/results"

HAVE_TORCH=0
"$PYTHON" -c "import torch.distributed.checkpoint" 2>/dev/null && HAVE_TORCH=1

# Drops the page cache (root), or evicts the named files and directories' files.
cold() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then
    echo 3 >/proc/sys/vm/drop_caches
  else
    find "$@" -type f -exec dd if={} iflag=nocache count=0 status=none \;
  fi
}

# Median wall seconds of REPS runs of a command (output discarded), one line.
median_seconds() {
  local i t0 t1 times=()
  for i in $(seq "$REPS"); do
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || { echo "bench-dcp: failed: $*" >&2; return 1; }
    t1=$(date +%s.%N)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
PIN=()
command -v taskset >/dev/null && PIN=(taskset -c 0)

# Seconds to read FILES... one after the other with dd in 16 MiB blocks.
read_seconds() {
  local t0 t1 f
  t0=$(date +%s.%N)
  for f in "$@"; do dd if="$f" of=/dev/null bs=16M status=none; done
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }'
}

echo "fpgather bench-dcp: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary $FPGATHER ($("$FPGATHER" --version 2>/dev/null || echo '?')), work in $WORK, export to $EXPORT_OUT"
[ "$HAVE_TORCH" = 1 ] && echo "torch: $("$PYTHON" -c 'import torch; print(torch.__version__)')" || echo "torch: none ($PYTHON)"

for n in $META_CHUNKS; do
  ck="$WORK/meta-$n"
  "$FPGATHER" --json bench dcp-make "$ck" --chunks "$n" --keys 1000 --ranks 8 >"$R/make-meta-$n.json"
  cold "$ck"
  "$FPGATHER" --json bench dcp "$ck" --reps "$REPS" --export-reps 1 --export-dir "$OUT" >"$R/ours-meta-$n.json"
  if [ "$HAVE_TORCH" = 1 ]; then
    "$PYTHON" "$SRC/scripts/bench_dcp_torch.py" "$ck" --reps "$REPS" >"$R/torch-meta-$n.json"
  fi
  { median_seconds "${PIN[@]}" "$FPGATHER" --no-progress --threads 1 inspect "$ck"
    median_seconds "${PIN[@]}" "$FPGATHER" --no-progress --threads 1 validate "$ck"; } >"$R/cli-meta-$n.txt"
  rm -rf "$ck"
done

for gb in $EXPORT_GB; do
  chunks=$(python3 -c "import math; print(math.ceil($gb * 1e9 / ($CHUNK_MIB << 20)))")
  ck="$WORK/export-$gb"
  # Keys of 16 chunks (larger than the export's 64 MiB slabs) at every size: only their number grows.
  "$FPGATHER" --json bench dcp-make "$ck" --chunks "$chunks" --keys $((chunks / 16 > 0 ? chunks / 16 : 1)) --ranks 8 \
    --chunk-bytes $((CHUNK_MIB * 1048576)) >"$R/make-export-$gb.json"
  bytes=$(python3 -c "import json; print(json.load(open('$R/make-export-$gb.json'))['tensor_bytes'])")
  head -c "$bytes" /dev/urandom >"$WORK/plain.bin"
  for round in $(seq "$ROUNDS"); do
    cold "$WORK/plain.bin"
    read_seconds "$WORK/plain.bin" >"$R/plain-$gb-$round.txt"
    cold "$ck"
    read_seconds "$ck"/*.distcp >"$R/files-$gb-$round.txt"
    cold "$ck"
    "$FPGATHER" --json bench dcp "$ck" --reps 1 --export-reps 1 --export-dir "$OUT" >"$R/export-$gb-$round.json"
  done
  rm -rf "$ck" "$WORK/plain.bin"
done

python3 - "$R" "$META_CHUNKS" "$EXPORT_GB" "$ROUNDS" "$RESULTS" <<'PY'
import json, os, statistics, sys
R, meta, export, rounds, out = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), int(sys.argv[4]), sys.argv[5]
load = lambda name: json.load(open(os.path.join(R, name)))
have = lambda name: os.path.exists(os.path.join(R, name))
res = {"metadata": [], "export": []}
MiB = 1 << 20

print("\n== .metadata decode and index-only validate (medians; cpu = process CPU seconds) ==")
print(f"{'chunks':>9} {'.metadata MB':>12} {'ours open s':>12} {'(cpu)':>8} {'torch read s':>13} {'(cpu)':>8} "
      f"{'no-gc s':>8} {'ratio':>7} {'no-gc':>7} | {'ours valid. s':>13} {'torch s':>8} {'ratio':>7}")
for n in meta:
    o = load(f"ours-meta-{n}.json")
    row = {"chunks": o["chunks"], "metadata_bytes": o["metadata_bytes"], "ours": o}
    t = load(f"torch-meta-{n}.json") if have(f"torch-meta-{n}.json") else None
    if t:
        row["torch"] = t
        row["read_ratio"] = t["read_metadata_median_s"] / o["open"]["median_s"]
        row["read_ratio_nogc"] = t["read_metadata_nogc_median_s"] / o["open"]["median_s"]
        row["validate_ratio"] = t["validate_median_s"] / o["validate"]["median_s"]
        print(f"{o['chunks']:>9} {o['metadata_bytes']/1e6:>12.1f} {o['open']['median_s']:>12.3f} "
              f"{o['open']['median_cpu_s']:>8.3f} {t['read_metadata_median_s']:>13.3f} "
              f"{t['read_metadata_median_cpu_s']:>8.3f} {t['read_metadata_nogc_median_s']:>8.3f} "
              f"{row['read_ratio']:>7.1f} {row['read_ratio_nogc']:>7.1f} | {o['validate']['median_s']:>13.4f} "
              f"{t['validate_median_s']:>8.3f} {row['validate_ratio']:>7.1f}")
    else:
        print(f"{o['chunks']:>9} {o['metadata_bytes']/1e6:>12.1f} {o['open']['median_s']:>12.3f} "
              f"{o['open']['median_cpu_s']:>8.3f} {'-':>13} {'-':>8} {'-':>8} {'-':>7} {'-':>7} | "
              f"{o['validate']['median_s']:>13.4f} {'-':>8} {'-':>7}")
    res["metadata"].append(row)

print("\n== the commands, a fresh process each (wall s, medians; one core) against torch in-process ==")
print(f"{'chunks':>9} {'inspect s':>10} {'validate s':>11} {'torch read s':>13} {'read+valid. s':>14} "
      f"{'inspect ratio':>14} {'validate ratio':>15}")
for n, row in zip(meta, res["metadata"]):
    inspect_s, validate_s = (float(x) for x in open(os.path.join(R, f"cli-meta-{n}.txt")).read().split())
    row["cli"] = {"inspect_s": inspect_s, "validate_s": validate_s}
    t = row.get("torch")
    if t:
        read = min(t["read_metadata_median_s"], t["read_metadata_nogc_median_s"])
        row["cli"]["inspect_ratio"] = read / inspect_s
        row["cli"]["validate_ratio"] = (read + t["validate_median_s"]) / validate_s
        print(f"{row['chunks']:>9} {inspect_s:>10.3f} {validate_s:>11.3f} {read:>13.3f} "
              f"{read + t['validate_median_s']:>14.3f} {row['cli']['inspect_ratio']:>14.1f} "
              f"{row['cli']['validate_ratio']:>15.1f}")
    else:
        print(f"{row['chunks']:>9} {inspect_s:>10.3f} {validate_s:>11.3f} {'-':>13} {'-':>14} {'-':>14} {'-':>15}")

print("\n== memory of the metadata (bytes per chunk) and of the tiny-chunk export ==")
print(f"{'chunks':>9} {'ours held':>10} {'ours peak':>10} {'torch held':>11} {'torch peak':>11} "
      f"{'export peak MiB':>16} {'export s':>9}")
for row in res["metadata"]:
    o, t = row["ours"], row.get("torch") or {}
    nan = float("nan")
    print(f"{o['chunks']:>9} {o['metadata_resident_bytes_per_chunk']:>10.0f} {o['open_peak_bytes_per_chunk']:>10.0f} "
          f"{t.get('metadata_resident_bytes_per_chunk', nan):>11.0f} "
          f"{t.get('metadata_peak_bytes_per_chunk') or nan:>11.0f} "
          f"{o['export']['timing']['peak_rss']/MiB:>16.1f} {o['export']['timing']['median_s']:>9.2f}")

print("\n== export read rate, cold cache, to tmpfs (GB/s; medians over rounds) ==")
print(f"{'GB':>6} {'plain dd':>9} {'ckpt files':>11} {'export':>8} {'/ plain':>8} {'/ files':>8} {'peak RSS MiB':>13}  rounds (plain, files, export)")
for gb in export:
    plain, files, exp, peaks = [], [], [], []
    for r in range(1, rounds + 1):
        e = load(f"export-{gb}-{r}.json")
        b = e["export"]["bytes_read"]
        plain.append(b / float(open(os.path.join(R, f"plain-{gb}-{r}.txt")).read()) / 1e9)
        files.append(b / float(open(os.path.join(R, f"files-{gb}-{r}.txt")).read()) / 1e9)
        exp.append(e["export"]["read_gbps"])
        peaks.append(e["export"]["timing"]["peak_rss"])
    m = statistics.median
    row = {"gb": float(gb), "bytes": b, "plain_gbps": plain, "files_gbps": files, "export_gbps": exp,
           "ratio_to_plain": m(exp) / m(plain), "ratio_to_files": m(exp) / m(files), "peak_rss": max(peaks)}
    res["export"].append(row)
    print(f"{gb:>6} {m(plain):>9.3f} {m(files):>11.3f} {m(exp):>8.3f} {row['ratio_to_plain']:>8.2f} "
          f"{row['ratio_to_files']:>8.2f} {max(peaks)/MiB:>13.1f}  " +
          "; ".join(f"{p:.2f} {f:.2f} {x:.2f}" for p, f, x in zip(plain, files, exp)))
json.dump(res, open(out, "w"), indent=1)
print(f"\n(all figures in {out})")
PY
