#!/usr/bin/env bash
# cmake --install puts the binary, man pages, shell completions, library, headers and CMake package in a prefix, and a
# separate project builds against it with find_package(fpgather).
source "$(dirname "$0")/common.sh"
: "${BUILD:?BUILD must name the build directory}"
expect_exit 0 cmake --install "$BUILD" --prefix "$WORK/prefix"
for f in bin/fpgather share/man/man1/fpgather.1 share/man/man1/fpgather-convert.1 share/man/man1/fpgather-train.1 \
         share/man/man1/fpgather-step.1 \
         include/fpgather/fp8/quantize.h include/fpgather/formats/safetensors/reader.h \
         lib/cmake/fpgather/fpgatherConfig.cmake lib/fpgather/hdf5-plugins/libfpgather_h5zstd.so \
         share/bash-completion/completions/fpgather share/zsh/site-functions/_fpgather; do
  [ -e "$WORK/prefix/$f" ] || fail "install lacks $f"
done
expect_exit 0 "$WORK/prefix/bin/fpgather" --version
# the installed completion scripts are what the installed binary generates
expect_exit 0 "$WORK/prefix/bin/fpgather" completion bash
cmp -s "$WORK/out" "$WORK/prefix/share/bash-completion/completions/fpgather" || fail "installed bash completion differs"
expect_exit 0 "$WORK/prefix/bin/fpgather" completion zsh
cmp -s "$WORK/out" "$WORK/prefix/share/zsh/site-functions/_fpgather" || fail "installed zsh completion differs"
expect_exit 0 cmake -S "$SRC/tests/install/consumer" -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
  -DCMAKE_BUILD_TYPE=Release
expect_exit 0 cmake --build "$WORK/consumer"
# amax 2 -> scale 448/2 = 224: 1.3 -> 291.2 -> 288 = 0x79, -0.5 -> -112 = 0xee, 2 -> 448 = 0x7e; 448 -> 0x7e
expect_exit 0 "$WORK/consumer/consumer"
expect_in "$WORK/out" "79 ee 7e 00 7e"
finish
