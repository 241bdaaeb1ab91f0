#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (build-asan/: clang, ASan and UBSan, see
# scripts/sanitizer-build.sh), makes each target's seed corpus from testdata and runs the targets one
# after the other, each for a bounded time or number of executions.
#   scripts/fuzz.sh [--smoke | --time S | --runs N] [TARGET...]
#     --smoke    60 s per target (what CI runs; the default)
#     --time S   S seconds per target
#     --runs N   N executions per target
# TARGET: fuzz_safetensors_header, fuzz_ckpt_index_image, fuzz_ckpt_index_tables, fuzz_dcp_metadata (default: every
# fuzz_* target built). Per target, in build-asan/fuzz/TARGET/: corpus/ (kept between runs: what the
# fuzzer found interesting), seeds/ (remade each run), log, and the reproducer of any finding
# (crash-*, leak-*, timeout-*, oom-*); rerun one with `build-asan/tests/fuzz/TARGET FILE`. Targets
# reading through HDF5 keep findings in HDF5's own code apart, in hdf5/, and those that no rerun of
# the input alone reproduces in unreproduced/ (see hdf5_targets and classify below); neither fails
# the run. Each finding's rerun report is kept beside it as FINDING.report.
# Prints executions, seconds and executions per second per target; exits 1 if any target failed.
# FPGATHER_ASAN_BUILD names another build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/sanitizer-build.sh

limit=(-max_total_time=60)
targets=()
while (($#)); do
  case $1 in
    --smoke) limit=(-max_total_time=60) ;;
    --time) limit=(-max_total_time="$2"); shift ;;
    --runs) limit=(-runs="$2"); shift ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done

configure_sanitizer_build
cmake --build "$FPGATHER_ASAN_BUILD" -j"$(nproc)" --target fpgather_fuzzers
bin=$FPGATHER_ASAN_BUILD/tests/fuzz
if ((${#targets[@]} == 0)); then
  for f in "$bin"/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi

# Seeds from testdata: the fixture files each target's input format has.
make_seeds() {
  local target=$1 out=$2 f i=0
  case $target in
    fuzz_safetensors_header)
      cp testdata/safetensors/*.safetensors testdata/safetensors/bad/*.safetensors \
        testdata/safetensors/sharded/*.safetensors "$out"/ ;;
    fuzz_ckpt_index_image)
      while IFS= read -r f; do cp "$f" "$out/index-$((i++)).h5"; done < <(find testdata/ckpt -name index.h5 | sort) ;;
    fuzz_ckpt_index_tables)
      find testdata/ckpt -name index.h5 -print0 | sort -z |
        xargs -0 "$bin/fpgather_fuzz_index_seeds" "$out" 2>/dev/null >/dev/null ;;
    fuzz_dcp_metadata)
      while IFS= read -r f; do cp "$f" "$out/metadata-$((i++))"; done < <(
        find testdata/dcp testdata/megatron -name .metadata -o -name '*.metadata' | sort) ;;
  esac
}

# Targets that read their input through HDF5, which is built with neither sanitizers nor coverage and
# whose own bugs on hostile files (1.10.8: reads past its buffers, divisions by zero, allocations of
# terabytes) the fuzzer finds within seconds. They run in fork mode, which goes on after a finding;
# afterwards each finding is rerun and kept in hdf5/ when HDF5's code is on the top of its stack
# before any of fpgather's, in unreproduced/ when the input alone does not fail, and fails the run
# otherwise.
hdf5_targets=" fuzz_ckpt_index_image "
fork=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)

# Where finding $2 of target $1 lies, from the report of rerunning it alone: "hdf5" when HDF5's code
# is on its stack before any of fpgather's (a frame with a source line under this repository;
# libstdc++ and the sanitizers are neither), "ours" when fpgather's is, "unreproduced" when three
# reruns all pass (a fork job's child runs thousands of inputs in one process, and HDF5 keeps
# library-wide state between them). The rerun has the fuzzing run's limit on one allocation, which a
# single-input run does not apply by default, so that an oom-* finding reproduces with the stack of
# its allocation; the limit on the process's memory is set above it, so that the memory watcher
# (which prints no stack) does not report first. It has the run's -timeout too: a timeout-* finding
# (HDF5 1.10.8 loops forever on some global heaps) would otherwise rerun without end; with it the
# rerun ends with libFuzzer's report and the stack of the loop. The last rerun's report is kept beside
# the finding.
classify() (
  set +o pipefail  # the rerun fails, as a finding does
  for _ in 1 2 3; do
    if ASAN_OPTIONS=$ASAN_OPTIONS:malloc_context_size=30 "$1" -malloc_limit_mb=2048 -rss_limit_mb=4096 -timeout=10 \
        "$2" >"$2.report" 2>&1; then
      continue
    fi
    grep -E '^ +#[0-9]+ ' "$2.report" | grep -m1 -E "libhdf5|$PWD/[^ ]+\.(cpp|h):[0-9]" |
      grep -q libhdf5 && echo hdf5 || echo ours
    exit 0
  done
  echo unreproduced
)

# No allocation stacks in reports (a third more executions per second; rerun a finding for them);
# a failed allocation returns null as it does outside the sanitizer, so HDF5 sees it fail.
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:malloc_context_size=0:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
status=0
summary=()
for t in "${targets[@]}"; do
  dir=$FPGATHER_ASAN_BUILD/fuzz/$t
  rm -rf "$dir/seeds"
  mkdir -p "$dir/corpus" "$dir/seeds"
  make_seeds "$t" "$dir/seeds"
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  echo "fuzz.sh: $t (${limit[*]}), $(ls "$dir/seeds" | wc -l) seeds, $(ls "$dir/corpus" | wc -l) in the corpus"
  mode=()
  [[ $hdf5_targets == *" $t "* ]] && mode=("${fork[@]}")
  start=$SECONDS
  rc=0
  "$bin/$t" "${limit[@]}" "${mode[@]}" "${dict[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/" "$dir/corpus" "$dir/seeds" >"$dir/log" 2>&1 || rc=$?
  secs=$((SECONDS - start))
  if ((${#mode[@]})); then  # fork mode: the last progress line "#EXECS: cov: ..."
    execs=$(sed -n 's/^#\([0-9]*\): .*/\1/p' "$dir/log" | tail -1)
    rate=$((${execs:-0} / (secs > 0 ? secs : 1)))
  else
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  fi
  ours=0 theirs=0 unrepro=0
  for f in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-*; do
    [ -e "$f" ] || continue
    [[ $f == *.report ]] && continue
    where=ours
    ((${#mode[@]})) && where=$(classify "$bin/$t" "$f")
    case $where in
      hdf5) mkdir -p "$dir/hdf5"; mv "$f" "$f.report" "$dir/hdf5/"; theirs=$((theirs + 1)) ;;
      unreproduced)
        mkdir -p "$dir/unreproduced"; mv "$f" "$f.report" "$dir/unreproduced/"; unrepro=$((unrepro + 1)) ;;
      *) ours=$((ours + 1)); echo "fuzz.sh: $t: finding $f" >&2 ;;
    esac
  done
  hdf5_note=""
  ((theirs)) && hdf5_note=", $theirs new in HDF5 ($dir/hdf5/)"
  ((unrepro)) && hdf5_note+=", $unrepro not reproduced alone ($dir/unreproduced/)"
  if ((ours || (rc != 0 && ${#mode[@]} == 0))); then
    status=1
    result="FAILED (exit $rc, $ours findings; see $dir/log)$hdf5_note"
    grep -E "^(==[0-9]+==ERROR|SUMMARY)|runtime error|Test unit written" "$dir/log" | head -5 || true
  else
    result="ok$hdf5_note"
  fi
  summary+=("$(printf '%-26s %12s execs %6s s %8s exec/s  %s' "$t" "${execs:-?}" "$secs" "${rate:-?}" "$result")")
done
printf '%s\n' "${summary[@]}"
exit $status
