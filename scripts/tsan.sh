#!/usr/bin/env bash
# The concurrency tests (ctest label `concurrency`: the storage, profile and
# server front-end suites and the in-process and daemon server tests) under
# ThreadSanitizer, in their own build directory. Any report fails the run:
# the process that made it exits at once (halt_on_error), and every report,
# from the test binaries or from the segstored and segctl processes they
# start, is also written under <build>/tsan-reports, which must stay empty.
#
# io_uring: ThreadSanitizer cannot see what the kernel reads and writes
# through the ring, so in this build the engine's automatic backend is
# pread/pwrite (src/storage/file_device.cc) and the tests that force io_uring
# skip themselves; io_uring is covered by the plain and ASan+UBSan runs
# (scripts/test.sh).
#
# By hand, after a run: TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/storage/storage_test
set -euo pipefail
cd "$(dirname "$0")/.."
build="${SEGSTORE_TSAN_BUILD_DIR:-build-tsan}"
reports="$PWD/${build}/tsan-reports"
start_all=$(date +%s)

# shellcheck source=scripts/stage.sh
. scripts/stage.sh

# The SIGKILL crash tests (storage and integration) check durability, which
# the sanitizer does not; the process they kill runs a single writer (storage)
# or the server threads ServerTest and DaemonTest already cover (integration).
# Pure single-threaded checks of a function against its model (the merged
# select, the fields codec) have no thread for the sanitizer to watch and
# take it tens of seconds.
exclude='^(CrashTest|SelectMergedTest|FieldCodecTest)\.'

run_tests() {
  rm -rf "$reports"
  mkdir -p "$reports"
  local rc=0
  # No suppressions: nothing third-party has needed one.
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=${reports}/report" \
    ctest --test-dir "$build" -L concurrency -E "$exclude" --no-tests=error --output-on-failure \
    -j2 --timeout 900 || rc=$?
  if compgen -G "${reports}/report*" > /dev/null; then
    echo "ThreadSanitizer reports:"
    cat "${reports}"/report*
    rc=1
  fi
  return "$rc"
}

# -O1 -g1 (line tables: reports keep file:line): an Asio-heavy file compiles
# in a third of the CPU time it takes at -O2 -g, and the tests run as fast.
stage "configure (TSan)" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DSEGSTORE_WERROR=ON -DSEGSTORE_SANITIZE=thread -DSEGSTORE_BUILD_BENCH=OFF
stage "build (TSan)" cmake --build "$build" -j2 --target concurrency_tests
stage "concurrency tests under TSan" run_tests
echo "=== all stages: $(( $(date +%s) - start_all )) s"
