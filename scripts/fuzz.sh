#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (build-asan/: clang, ASan and UBSan, see
# scripts/sanitizer-build.sh), makes each target's seed corpus from testdata and runs the targets one
# after the other, each for a bounded time or number of executions.
#   scripts/fuzz.sh [--smoke | --time S | --runs N] [TARGET...]
#     --smoke    60 s per target (what CI runs; the default)
#     --time S   S seconds per target
#     --runs N   N executions per target
# TARGET: fuzz_safetensors_header, fuzz_ckpt_index_image, fuzz_ckpt_index_tables (default: every
# fuzz_* target built). Per target, in build-asan/fuzz/TARGET/: corpus/ (kept between runs: what the
# fuzzer found interesting), seeds/ (remade each run), log, and the reproducer of any finding
# (crash-*, leak-*, timeout-*, oom-*); rerun one with `build-asan/tests/fuzz/TARGET FILE`.
# Prints executions, seconds and executions per second per target; exits 1 if any target failed.
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
  esac
}

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1
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
  start=$SECONDS
  rc=0
  "$bin/$t" "${limit[@]}" "${dict[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/" "$dir/corpus" "$dir/seeds" >"$dir/log" 2>&1 || rc=$?
  secs=$((SECONDS - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  if ((rc != 0)); then
    status=1
    result="FAILED (exit $rc; see $dir/log)"
    grep -E "^(==[0-9]+==ERROR|SUMMARY)|runtime error|Test unit written" "$dir/log" | head -5 || true
  else
    result=ok
  fi
  summary+=("$(printf '%-26s %12s execs %6s s %8s exec/s  %s' "$t" "${execs:-?}" "$secs" "${rate:-?}" "$result")")
done
printf '%s\n' "${summary[@]}"
exit $status
