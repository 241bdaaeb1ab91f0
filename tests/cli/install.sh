#!/usr/bin/env bash
# cmake --install puts the binary, man pages, shell completions, library, public headers and CMake
# package in a prefix; a separate C++-only project (tests/install/consumer) builds against it with
# find_package(fpgather), and against the build tree, and runs.
source "$(dirname "$0")/common.sh"
: "${BUILD:?BUILD must name the build directory}"
: "${SRC:?SRC must name the source directory}"
P="$WORK/prefix"
expect_exit 0 cmake --install "$BUILD" --prefix "$P"
for f in bin/fpgather share/man/man1/fpgather.1 share/man/man1/fpgather-convert.1 share/man/man1/fpgather-train.1 \
         share/man/man1/fpgather-step.1 include/fpgather/fpgather.h \
         lib/cmake/fpgather/fpgatherConfig.cmake lib/cmake/fpgather/fpgatherTargets.cmake \
         lib/fpgather/hdf5-plugins/libfpgather_h5zstd.so \
         share/bash-completion/completions/fpgather share/zsh/site-functions/_fpgather \
         share/fpgather/json/inspect.schema.json share/fpgather/json/error.schema.json; do
  [ -e "$P/$f" ] || fail "install lacks $f"
done

# Only the public headers are installed, all of them.
(cd "$SRC/lib/include" && find fpgather -type f | sort) >"$WORK/public"
(cd "$P/include" && find . -type f | sed 's|^\./||' | sort) >"$WORK/installed"
cmp -s "$WORK/public" "$WORK/installed" || { fail "installed headers are not lib/include/fpgather's:"; diff "$WORK/public" "$WORK/installed" >&2; }
[ -e "$P/include/fpgather/core" ] && fail "internal headers installed (include/fpgather/core)"

# The package records no path of this machine: dependencies by imported target, its own files
# relative to the prefix; the only include directory it gives is the prefix's include/.
if grep -nE '[";]/[A-Za-z]' "$P"/lib/cmake/fpgather/fpgather*.cmake >"$WORK/paths"; then
  fail "the installed package names absolute paths:"; sed 's/^/    /' "$WORK/paths" >&2
fi
grep -h INTERFACE_INCLUDE_DIRECTORIES "$P"/lib/cmake/fpgather/fpgatherTargets.cmake >"$WORK/includes"
[ "$(cat "$WORK/includes")" = '  INTERFACE_INCLUDE_DIRECTORIES "${_IMPORT_PREFIX}/include"' ] ||
  { fail "exported include directories:"; sed 's/^/    /' "$WORK/includes" >&2; }

expect_exit 0 "$P/bin/fpgather" --version
# the installed completion scripts are what the installed binary generates
expect_exit 0 "$P/bin/fpgather" completion bash
cmp -s "$WORK/out" "$P/share/bash-completion/completions/fpgather" || fail "installed bash completion differs"
expect_exit 0 "$P/bin/fpgather" completion zsh
cmp -s "$WORK/out" "$P/share/zsh/site-functions/_fpgather" || fail "installed zsh completion differs"

# A training checkpoint from the installed binary, for the consumer to open.
expect_exit 0 "$P/bin/fpgather" train --dp 2 --steps 3 --save "$WORK/run" --no-progress

# consumer DIR: builds the consumer in DIR (configure arguments after it) and runs it.
consumer() {
  local dir=$1; shift
  expect_exit 0 cmake -S "$SRC/tests/install/consumer" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@"
  expect_exit 0 cmake --build "$dir"
  mkdir -p "$dir/work"
  expect_exit 0 "$dir/consumer" "$WORK/run" "$dir/work"
  cp "$WORK/out" "$dir/output"
  for line in "fp8 F8_E4M3: 79 ee 7e 00; dequantized: 1.28571 -0.5 2 0" \
              "adamw: param 0.899000 exp_avg 0.050000 exp_avg_sq 0.000250" \
              "safetensors: x F32 [2, 3] 24 bytes, metadata written_by=consumer" \
              "checkpoint: fpgather, valid, step 3, dp 2," \
              "resharded: dp 2 -> 1, valid, diff equal" \
              "not a checkpoint: exit code 3"; do
    expect_in "$dir/output" "$line"
  done
  grep -q FAILED "$dir/output" && fail "consumer: $(grep FAILED "$dir/output")"
  # every public header compiled on its own
  [ "$(ls "$dir/header_check" | wc -l)" -eq "$(wc -l <"$WORK/public")" ] || fail "header check: not one source per header"
}
consumer "$WORK/consumer-prefix" -DCMAKE_PREFIX_PATH="$P"
consumer "$WORK/consumer-with-c" -DCMAKE_PREFIX_PATH="$P" -DCONSUMER_ENABLE_C=ON
consumer "$WORK/consumer-build-tree" -Dfpgather_DIR="$BUILD"
finish
