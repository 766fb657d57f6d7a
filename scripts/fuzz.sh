#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang in build-fuzz
# (SEGSTORE_FUZZ=ON: AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer), writes their seeds, and runs every target for
# SEGSTORE_FUZZ_SECONDS seconds (default 60), SEGSTORE_FUZZ_JOBS at a time
# (default 2). Exits non-zero on any finding (crash, sanitizer report, failed
# check, leak, timeout, out-of-memory), printing the saved input and the
# command that reproduces it.
#
#   scripts/fuzz.sh                 every target
#   scripts/fuzz.sh frame recovery  only these (names without "fuzz_")
#
# Each target keeps its corpus in build-fuzz/fuzz/corpus/<target> (it grows
# from run to run; delete it to start from the seeds again); findings go to
# build-fuzz/fuzz/findings/<target>/, logs to build-fuzz/fuzz/logs/.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${SEGSTORE_FUZZ_SECONDS:-60}
jobs=${SEGSTORE_FUZZ_JOBS:-2}
build=${SEGSTORE_FUZZ_BUILD_DIR:-build-fuzz}
started=$(date +%s)

all_targets=(frame hello get batch_get count upsert batch_upsert remove trim delete expire link field
             copy_partition get_reader resp record_codec log_entry recovery)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${all_targets[@]}"); fi

# fuzz_recovery needs the storage engine, the slowest part to build; the
# other targets need only the wire and the codec. Those are built first and
# start fuzzing while the engine builds behind them; fuzz_recovery runs last.
quick_targets=() engine_targets=()
for t in "${targets[@]}"; do
  if [[ " ${all_targets[*]} " != *" $t "* ]]; then
    echo "fuzz: no target fuzz_$t (targets: ${all_targets[*]})" >&2
    exit 2
  fi
  if [ "$t" = recovery ]; then engine_targets+=("$t"); else quick_targets+=("$t"); fi
done
targets=("${quick_targets[@]}" "${engine_targets[@]}")

./scripts/install-deps.sh

# -O1 and line tables: fast enough to fuzz, quick to build, readable stacks.
cmake -S . -B "$build" \
  -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
  -DSEGSTORE_FUZZ=ON -DSEGSTORE_BUILD_TESTS=OFF -DSEGSTORE_BUILD_BENCH=OFF >/dev/null

bin="$root/$build/tests/fuzz"
work="$root/$build/fuzz"
rm -rf "$work/seeds" "$work/logs"
mkdir -p "$work/seeds" "$work/logs" "$work/corpus" "$work/findings"

cmake --build "$build" -j "$jobs" --target fuzz_seeds "${quick_targets[@]/#/fuzz_}"
"$bin/fuzz_seeds" "$root/proto/examples" "$work/seeds"
built=$(date +%s)
echo "fuzz: fuzzing starts $((built - started)) s in"
engine_pid=""
if [ ${#engine_targets[@]} -gt 0 ]; then
  echo "fuzz: building ${engine_targets[*]/#/fuzz_} meanwhile (log: $work/logs/build-engine.log)"
  cmake --build "$build" -j "$jobs" --target fuzz_recovery_seeds "${engine_targets[@]/#/fuzz_}" \
    >"$work/logs/build-engine.log" 2>&1 &
  engine_pid=$!
fi

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# Runs one target; its exit status and wall time land in logs/<target>.rc, .secs.
run_one() {
  local t=$1
  local corpus="$work/corpus/$t" findings="$work/findings/$t" log="$work/logs/$t.log"
  mkdir -p "$corpus" "$findings"
  rm -f "$findings"/*
  local t0 rc=0
  t0=$(date +%s)
  # -timeout: seconds one input may take (a hang); -rss_limit_mb: the
  # process's memory (also the largest single allocation). The outer timeout
  # only guards against a fuzzer that does not stop by itself.
  timeout -k 10 $((seconds + 120)) "$bin/fuzz_$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$findings/" \
    "$corpus" "$work/seeds/$t" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$work/logs/$t.rc"
  echo $(($(date +%s) - t0)) >"$work/logs/$t.secs"
}

pids=()
# Waits until fewer than $jobs fuzzers run.
wait_for_slot() {
  while [ ${#pids[@]} -ge "$jobs" ]; do
    local finished="" keep=() p
    wait -n -p finished "${pids[@]}" || true
    for p in "${pids[@]}"; do [ "$p" != "$finished" ] && keep+=("$p"); done
    pids=("${keep[@]}")
  done
}

for t in "${targets[@]}"; do
  wait_for_slot
  if [ "$t" = recovery ] && [ -n "$engine_pid" ]; then
    if ! wait "$engine_pid"; then
      wait
      cat "$work/logs/build-engine.log" >&2
      echo "fuzz: FAILED: building the engine targets failed (above)" >&2
      exit 1
    fi
    engine_pid=""
    echo "fuzz: ${engine_targets[*]/#/fuzz_} built"
    "$bin/fuzz_recovery_seeds" "$work/seeds"
  fi
  echo "fuzz: fuzz_$t for ${seconds} s"
  run_one "$t" &
  pids+=($!)
done
wait

failed=0
printf '\n%-18s %8s %12s %10s  %s\n' target seconds executions exec/s result
for t in "${targets[@]}"; do
  log="$work/logs/$t.log"
  rc=$(cat "$work/logs/$t.rc")
  secs=$(cat "$work/logs/$t.secs")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  result=ok
  [ "$rc" -ne 0 ] && result="FAILED (exit $rc)"
  printf '%-18s %8s %12s %10s  %s\n' "fuzz_$t" "$secs" "${execs:-?}" "${rate:-?}" "$result"
done

for t in "${targets[@]}"; do
  rc=$(cat "$work/logs/$t.rc")
  [ "$rc" -eq 0 ] && continue
  failed=1
  log="$work/logs/$t.log"
  echo
  echo "==== fuzz_$t: FINDING (exit $rc); log: $log"
  grep -E 'ERROR: |FUZZ_CHECK failed|SUMMARY: |runtime error:|Test unit written' "$log" | head -20 || true
  shopt -s nullglob
  inputs=("$work/findings/$t"/*)
  shopt -u nullglob
  if [ ${#inputs[@]} -eq 0 ]; then
    echo "no input was saved; the end of the log:"
    tail -30 "$log"
  fi
  for f in "${inputs[@]}"; do
    echo "input:     $f"
    echo "reproduce: $bin/fuzz_$t $f"
  done
done

echo
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, ${jobs} at a time;" \
  "total $(($(date +%s) - started)) s (fuzzing began at $((built - started)) s)"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED: findings above" >&2
  exit 1
fi
echo "fuzz: no findings"
