#!/usr/bin/env bash
# Runs fpgather on every crafted input of testdata/dcp/make_limit_cases.py under an address-space cap
# and reports, per case and command: the exit code, the peak resident memory, the time and the first
# line of the message. Each must end with its expected exit code (1 or 3, never 4 or a signal) and
# peak below the bound formats/dcp/FORMAT.md states ("Memory"): 64 MiB + 17 × the .metadata's size
# (the file itself and its decoding budget) + 64 MiB for the process itself (224 MiB for convert,
# whose export keeps two 64 MiB slabs).
#   scripts/probe-limits.sh [--cap KIB] [--keep DIR] [FPGATHER]
#     --cap KIB   the address-space cap (ulimit -v), default 1000000 (1 GB)
#     --keep DIR  write the cases to DIR and keep them (default: a temporary directory, removed)
#     FPGATHER    the binary (default build/fpgather)
# Exits 1 if any case missed its exit code or its bound, 77 (skipped) under AddressSanitizer; CI runs
# it as the ctest test cli.probe_limits.
set -euo pipefail
cd "$(dirname "$0")/.."
cap=1000000
keep=""
fpgather=build/fpgather
while (($#)); do
  case $1 in
    --cap) cap=$2; shift ;;
    --keep) keep=$2; shift ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "probe-limits.sh: unknown option $1" >&2; exit 2 ;;
    *) fpgather=$1 ;;
  esac
  shift
done
[ -x "$fpgather" ] || { echo "probe-limits.sh: no fpgather binary at $fpgather" >&2; exit 2; }
# AddressSanitizer's shadow memory is address space and resident memory the bounds do not count.
if [ -n "${ASAN_OPTIONS:-}" ]; then
  echo "probe-limits.sh: skipped under AddressSanitizer (ASAN_OPTIONS is set)"
  exit 77
fi
if [ -n "$keep" ]; then
  dir=$keep
  mkdir -p "$dir"
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/probe-limits.XXXXXX")
  trap 'rm -rf "$dir"' EXIT
fi
python3 testdata/dcp/make_limit_cases.py "$dir"

# One row per run: case, expected exit codes, the command's arguments after `fpgather --no-progress`.
# The bound is taken from the case's .metadata.
runs=(
  "shared_chunks|3|validate @"
  "shared_chunks|3|inspect @"
  "shared_size|3|validate @"
  "shared_planner|3|validate @"
  "set_of_memo|3|validate @"
  "exponential_dag|3|validate @"
  "sparse_metadata|3|validate @"
  "missing_storage|1|validate @"
  "zero_stride|1|validate --data @"
  "zero_stride|3|diff --no-validate @ @"
  "zero_stride|3|convert --no-validate @ $dir/out.safetensors"
  "zero_stride_2e34|1|validate --data @"
  "zero_stride_2e34|3|diff --no-validate @ @"
  "zero_stride_sparse|1|validate --data @"
  "zero_stride_sparse|3|diff @ @"
  "zero_stride_sparse|3|convert @ $dir/out.safetensors"
)
python3 - "$fpgather" "$dir" "$cap" "${runs[@]}" <<'PY'
import os, resource, subprocess, sys, time

fpgather, root, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
MiB = 1 << 20
failed = 0
print(f"address-space cap {cap} KiB; bound = 64 MiB + 17 x .metadata + 64 MiB (process; convert 224 MiB)")
print(f"{'case':<20} {'command':<22} {'exit':>4} {'want':>4} {'peak MiB':>9} {'bound MiB':>9} {'s':>6}  message")
for row in sys.argv[4:]:
    case, want, args = row.split("|")
    path = os.path.join(root, case)
    argv = [fpgather, "--no-progress"] + [path if a == "@" else a for a in args.split()]
    meta = os.path.getsize(os.path.join(path, ".metadata"))
    # A .metadata past the cap is refused unread: only its head counts.
    # The process itself takes some 20 MB, and convert's export two slabs of 64 MiB more.
    process = 64 * MiB + (160 * MiB if args.startswith("convert") else 0)
    bound = 64 * MiB + 17 * (meta if meta <= (1 << 30) else 0) + process
    t = time.time()
    with open(os.path.join(root, "out"), "w+") as out, open(os.path.join(root, "err"), "w+") as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err,
                                 preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap * 1024, cap * 1024)))
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the largest so far
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        p = subprocess.CompletedProcess(argv, child.returncode, out.read(), err.read())
    wall = time.time() - t
    peak_mib = usage.ru_maxrss / 1024
    msg = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or [""])[0]
    if p.returncode == 1 and p.stdout:
        msg = p.stdout.strip().splitlines()[-1]
    ok = str(p.returncode) == want and peak_mib * MiB <= bound
    failed += not ok
    cmd = " ".join(a for a in args.split() if a != "@" and not a.startswith(root))
    print(f"{case:<20} {cmd:<22} {p.returncode:>4} {want:>4} {peak_mib:>9.1f} {bound / MiB:>9.1f} {wall:>6.2f}  "
          f"{'' if ok else 'FAILED: '}{msg[:160]}")
sys.exit(1 if failed else 0)
PY
