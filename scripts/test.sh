#!/usr/bin/env bash
# Installs the dependencies, builds segstore with warnings as errors and runs
# every test. README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${SEGSTORE_BUILD_DIR:-build}"
start_all=$(date +%s)

stage() {
  local name=$1
  shift
  local t0
  t0=$(date +%s)
  echo "=== ${name}"
  "$@"
  echo "=== ${name}: $(( $(date +%s) - t0 )) s"
}

stage "install dependencies" ./scripts/install-deps.sh
stage "configure" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEGSTORE_WERROR=ON
stage "build" cmake --build "$build" -j2
stage "unit and integration tests" ctest --test-dir "$build" --output-on-failure -j2 --timeout 600
echo "=== all stages: $(( $(date +%s) - start_all )) s"
