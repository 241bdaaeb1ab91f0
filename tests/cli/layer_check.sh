#!/usr/bin/env bash
# cmake/LayerCheck.cmake on the source tree, and on copies of it with one include that breaks the
# layering each: an include that goes up a layer (lib/ into formats/ among them), a format that
# includes a use case, and a public header that includes anything but the standard library and the
# other public headers. Each is refused with the file and the include named.
source "$(dirname "$0")/common.sh"
: "${SRC:?SRC must name the source directory}"
check() { cmake -DFPG_SOURCE_DIR="$1" -P "$SRC/cmake/LayerCheck.cmake"; }

expect_exit 0 check "$SRC"

# violation FILE LINE MESSAGE: FILE (relative to the tree) gains LINE; the check fails with MESSAGE.
violation() {
  local tree="$WORK/tree"
  rm -rf "$tree" && mkdir -p "$tree/lib"
  cp -r "$SRC/lib/." "$tree/lib/" && cp -r "$SRC/formats" "$SRC/kernels" "$SRC/cmd" "$tree/"
  printf '%s\n' "$2" >>"$tree/$1"
  expect_exit 1 check "$tree"
  tr -s ' \n' ' ' <"$WORK/err" >"$WORK/message"  # CMake wraps its messages
  expect_in "$WORK/message" "$3"
}
violation lib/core/shape.h '#include "app/train/trainer.h"' \
  'lib/core/shape.h (layer core) has `#include "app/train/trainer.h"`, a header of a layer above it (app)'
violation lib/app/train/trainer.h '#include "api/boundary.h"' 'lib/app/train/trainer.h (layer app) has `#include "api/boundary.h"`'
violation lib/fp8/recipe.h '#include <fpgather/error.h>' 'lib/fp8/recipe.h (layer numerics'
violation lib/api/boundary.h '#include "cmd/cli.h"' 'lib/api/boundary.h (layer api) has `#include "cmd/cli.h"`'
violation lib/include/fpgather/error.h '#include "core/error.h"' \
  'public API: lib/include/fpgather/error.h has `#include "core/error.h"`; public headers include only the standard library'
violation lib/include/fpgather/safetensors.h '#include <nlohmann/json.hpp>' \
  'public API: lib/include/fpgather/safetensors.h has `#include <nlohmann/json.hpp>`'
violation cmd/validate.cpp '#include "formats/fpckpt/reader.h"' \
  'cmd/validate.cpp (a subcommand) has `#include "formats/fpckpt/reader.h"`; commands reach the formats through app'
violation lib/app/convert/param_export.cpp '#include "formats/dcp/dcp_writer.h"' \
  'lib/app/convert/param_export.cpp (layer app) has `#include "formats/dcp/dcp_writer.h"`, a header of a layer above it (formats)'
violation lib/ckpt/state_store.h '#include "formats/fpckpt/reader.h"' \
  'lib/ckpt/state_store.h (layer pipeline and ckpt) has `#include "formats/fpckpt/reader.h"`, a header of a layer above it (formats)'
violation formats/fpckpt/state_store.cpp '#include "app/checkpoint/checkpointing.h"' \
  'formats/fpckpt/state_store.cpp (layer formats) has `#include "app/checkpoint/checkpointing.h"`, a header of app; the formats implement the seams of ckpt and core'
violation lib/include/fpgather/quantize.h '#include <stdint.h>' 'public API: lib/include/fpgather/quantize.h has `#include <stdint.h>`'
finish
