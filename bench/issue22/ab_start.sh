#!/usr/bin/env bash
# Two segstored builds started in turn on the same data file, the page cache
# dropped before each start: the recovery time each logs, ROUNDS rounds. How
# the A/B figures of bench/RESULTS.md's "2026-11-27, afternoon" entry were
# taken.
#   MODE=checkpoint: each start loads the index checkpoint (a clean stop
#     after it writes the next one).
#   MODE=crash: the checkpoint is removed before each start (as a crash after
#     any write leaves it stale) and the server is killed after it.
# Usage: bench/issue22/ab_start.sh OLD_SEGSTORED NEW_SEGSTORED DATA_FILE
# Environment: MODE (checkpoint), ROUNDS (3). Needs root (drop_caches); the
# data file is one a KEEP=1 run of bench/issue22/restart.sh left.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 OLD_SEGSTORED NEW_SEGSTORED DATA_FILE"; exit 2; }
MODE=${MODE:-checkpoint}
ROUNDS=${ROUNDS:-3}
DATA=$3
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for which in old new; do
    bin=$1
    [ "$which" = new ] && bin=$2
    [ "$MODE" = crash ] && rm -f "$DATA.index"
    sync
    echo 3 > /proc/sys/vm/drop_caches
    "$bin" --listen 127.0.0.1:0 --admin-listen off --data "$DATA" > "$LOG" 2>&1 &
    pid=$!
    while ! grep -q "serving on" "$LOG"; do
      kill -0 "$pid" 2>/dev/null || { cat "$LOG"; exit 1; }
      sleep 0.05
    done
    if [ "$MODE" = crash ]; then kill -KILL "$pid"; else kill -TERM "$pid"; fi
    wait "$pid" || true
    echo "$r $which $(grep -o ' recovered [^ ]* in [0-9.]* s' "$LOG" | grep -o '[0-9.]* s$')"
  done
done
