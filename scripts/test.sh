#!/usr/bin/env bash
# Installs the dependencies, builds segstore with warnings as errors and runs
# every test; then the suite under ASan+UBSan (built by clang), the
# concurrency tests under TSan and every fuzzer for 30 s
# (SEGSTORE_FUZZ_SECONDS). README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${SEGSTORE_BUILD_DIR:-build}"
start_all=$(date +%s)

# shellcheck source=scripts/stage.sh
. scripts/stage.sh

stage "install dependencies" ./scripts/install-deps.sh
# -g1: line tables and function names, enough for a failing test's stack,
# at two thirds of -g's compile time.
# shellcheck disable=SC2046
stage "configure" cmake -S . -B "$build" $(fresh_generator "$build") -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DSEGSTORE_WERROR=ON
stage "build" cmake --build "$build" -j2
stage "unit and integration tests" ctest --test-dir "$build" --output-on-failure -j2 --timeout 600

# The suite again under AddressSanitizer and UndefinedBehaviorSanitizer: any
# finding aborts the test that made it. The benchmarks' own tests are left
# out of this pass for now (a longer build); the routing test's real Redis
# runs here too.
# SEGSTORE_SANITIZERS=0 skips it.
if [[ "${SEGSTORE_SANITIZERS:-1}" != 0 ]]; then
  asan="${build}-asan"
  # Built by clang at -O1 with line tables: half the compile time of GCC's
  # -O2 -g1 under these sanitizers (a test file took 30 s against 57 s),
  # and this build was CI's longest stage; the plain build above is GCC's.
  # shellcheck disable=SC2046
  stage "configure (ASan+UBSan)" env CC=clang CXX=clang++ cmake -S . -B "$asan" \
    $(fresh_generator "$asan") -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
    -DSEGSTORE_WERROR=ON -DSEGSTORE_SANITIZE=address,undefined -DSEGSTORE_BUILD_BENCH=OFF
  stage "build (ASan+UBSan)" cmake --build "$asan" -j2
  stage "tests under ASan+UBSan" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$asan" --output-on-failure -j2 --timeout 900
fi

# The concurrency tests under ThreadSanitizer (scripts/tsan.sh: its own build
# directory, io through pread/pwrite so the sanitizer sees every access).
# SEGSTORE_TSAN=0 skips it.
if [[ "${SEGSTORE_TSAN:-1}" != 0 ]]; then
  stage "concurrency tests under TSan (scripts/tsan.sh)" \
    env SEGSTORE_TSAN_BUILD_DIR="${build}-tsan" ./scripts/tsan.sh
fi

# Every libFuzzer target for SEGSTORE_FUZZ_SECONDS (30 here; scripts/fuzz.sh
# alone defaults to 60) each, built with clang (scripts/fuzz.sh); any finding
# fails. SEGSTORE_FUZZING=0 skips it.
if [[ "${SEGSTORE_FUZZING:-1}" != 0 ]]; then
  stage "fuzzing (scripts/fuzz.sh)" env SEGSTORE_FUZZ_BUILD_DIR="${build}-fuzz" \
    SEGSTORE_FUZZ_SECONDS="${SEGSTORE_FUZZ_SECONDS:-30}" ./scripts/fuzz.sh
fi
echo "=== all stages: $(( $(date +%s) - start_all )) s"
