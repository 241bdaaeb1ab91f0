# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: the one build both use, build-asan/ (or
# $FPGATHER_ASAN_BUILD), configured with clang, AddressSanitizer and UndefinedBehaviorSanitizer on
# every target, and the libFuzzer targets enabled. CUDA is off (its runtime is not instrumented).
FPGATHER_ASAN_BUILD=${FPGATHER_ASAN_BUILD:-build-asan}

# Whether clang++ links a fuzz target with the sanitizer and libFuzzer runtimes.
clang_links_fuzzer() {
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null
}

# Installs clang and its runtimes (Debian/Ubuntu: libclang-rt-N-dev) unless they are there.
ensure_clang() {
  command -v clang++ >/dev/null && clang_links_fuzzer && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "sanitizer-build: installing clang and its runtimes"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang >/dev/null
  local major
  major=$(clang++ -dumpversion | cut -d. -f1)
  clang_links_fuzzer || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "libclang-rt-$major-dev" >/dev/null
  clang_links_fuzzer || { echo "sanitizer-build: clang++ cannot link -fsanitize=fuzzer,address,undefined" >&2; return 1; }
}

configure_sanitizer_build() {
  ensure_clang
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  # Optimized, with line tables only: reports name file and line, and the build costs less than -g.
  cmake -S . -B "$FPGATHER_ASAN_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
    -DFPGATHER_CUDA=OFF -DFPGATHER_SANITIZE=address,undefined -DFPGATHER_FUZZ=ON >/dev/null
}
