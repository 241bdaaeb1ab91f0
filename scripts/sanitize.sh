#!/usr/bin/env bash
# The unit and CLI tests under AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer:
# builds fpgather, the unit tests and the tools the CLI tests run in build-asan/ (clang; see
# scripts/sanitizer-build.sh), then runs ctest without the gpu and interop labels. A sanitizer report
# aborts the process that made it, so the test that hit it fails.
#   scripts/sanitize.sh [ctest arguments...]
# cli.install is left out: it links a separate project, built without sanitizers, against the
# instrumented library, which cannot link. cli.comm_mpi runs without leak detection (below).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/sanitizer-build.sh
start=$SECONDS
configure_sanitizer_build
cmake --build "$FPGATHER_ASAN_BUILD" -j"$(nproc)" \
  --target fpgather_cli fpgather_h5zstd fpgather_tests fpgather_make_step_files fpgather_comm_mpi_check fpgather_make_ckpt_fixtures \
  fpgather_make_dcp
built=$SECONDS
asan=halt_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0  # HDF5's own leak (there: why)
ASAN_OPTIONS=$asan:detect_leaks=1 \
  ctest --test-dir "$FPGATHER_ASAN_BUILD" -j2 -LE 'gpu|interop' -E '^cli\.(install|comm_mpi)$' --output-on-failure "$@"
# Under mpirun without leak detection: OpenMPI leaks in its plugins, which it unloads in
# MPI_Finalize, so LeakSanitizer cannot name them (<unknown module>) and no suppression can match.
ASAN_OPTIONS=$asan:detect_leaks=0 \
  ctest --test-dir "$FPGATHER_ASAN_BUILD" -R '^cli\.comm_mpi$' --output-on-failure "$@"
echo "sanitize: built in $((built - start)) s, tests ran in $((SECONDS - built)) s"
