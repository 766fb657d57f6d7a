#!/usr/bin/env bash
# Issue 20: DRAM per link (run from the source tree) when the same links are made again (each relink rewrites the members'
# records at new offsets), after the reference table's compaction fix.
set -euo pipefail
NEW=build/src/server/segstored
SB=build/bench/segbench/segbench
D=${DATA_DIR:-/tmp/issue20-relink}; OUT=${OUT:-/tmp/issue20-out}
mkdir -p "$OUT"
rm -rf "$D"; mkdir -p "$D"
"$NEW" --listen 127.0.0.1:17725 --admin-listen off --data "$D/segstore.dat" --file-size 4GiB > "$OUT/relink.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true; wait $PID || true; rm -rf "$D"' EXIT
for i in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/17725) 2>/dev/null && break; sleep 0.2; done
"$SB" --segstore 127.0.0.1:17725 --users 100000 --connections 16 --seconds 5 --group-size 5 load link
for r in 2 3 4; do
  echo "--- link again, round $r"
  "$SB" --segstore 127.0.0.1:17725 --users 100000 --connections 16 --seconds 5 --group-size 5 link
done
