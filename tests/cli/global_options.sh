#!/usr/bin/env bash
# Global options and exit codes of the fpgather binary.
source "$(dirname "$0")/common.sh"

expect_exit 0 "$FPGATHER" --version
expect_in "$WORK/out" "fpgather "
expect_exit 0 "$FPGATHER" --help
for sub in convert inspect bench; do expect_in "$WORK/out" "$sub"; done
expect_exit 2 "$FPGATHER"                       # a subcommand is required
expect_exit 2 "$FPGATHER" no-such-subcommand
expect_exit 2 "$FPGATHER" --log-level chatty inspect "$TESTDATA/models/tiny-llama.safetensors"
expect_in "$WORK/err" "unknown log level"
FPGATHER_LOG=chatty expect_exit 2 "$FPGATHER" inspect "$TESTDATA/models/tiny-llama.safetensors"
expect_exit 3 "$FPGATHER" inspect "$WORK/does-not-exist.safetensors"
expect_in "$WORK/err" "does-not-exist.safetensors"
finish
