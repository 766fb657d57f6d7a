#!/usr/bin/env bash
# Issue 22's backup figures, in one run from the repository's root:
#   - one segstored on a fresh FILE_SIZE data file, loaded with USERS
#     reference users (segbench load);
#   - the get p99 without a backup: segbench get, open loop at RATE gets/s
#     for SECONDS;
#   - a backup (segctl backup, unpaced, or paced by BACKUP_RATE users/s),
#     with the same get run beside it: the backup's rate (users/s, MB/s) and
#     the get p99 while it runs;
#   - a restore of that file into a second fresh segstored: its rate.
# Then a summary (also $OUT/summary.txt); logs and JSON reports in $OUT.
# Needs jq. Run it at nice 0, alone on the machine, for the measurement.
#
# Usage: bench/issue22/backup.sh
# Environment (defaults): BUILD (build-rel: a Release build holding
#   src/server/segstored, src/tools/segctl and bench/segbench/segbench)
#   USERS (1000000) FILE_SIZE (4GiB) RATE (20000 gets/s) SECONDS (20)
#   BACKUP_RATE (0: unpaced) DATA_DIR (/tmp/issue22-backup) OUT
#   (/tmp/issue22-backup-out).
# A smoke run: USERS=20000 FILE_SIZE=256MiB SECONDS=3 RATE=2000 bench/issue22/backup.sh
set -euo pipefail

SRC=$(pwd)
[ -f "$SRC/bench/issue22/backup.sh" ] || { echo "run from the repository's root"; exit 2; }
BUILD=${BUILD:-build-rel}
USERS=${USERS:-1000000}
FILE_SIZE=${FILE_SIZE:-4GiB}
RATE=${RATE:-20000}
SECONDS_RUN=${SECONDS:-20}
BACKUP_RATE=${BACKUP_RATE:-0}
D=${DATA_DIR:-/tmp/issue22-backup}
OUT=${OUT:-/tmp/issue22-backup-out}
SEGSTORED=$BUILD/src/server/segstored
SEGCTL=$BUILD/src/tools/segctl
SB=$BUILD/bench/segbench/segbench
for f in "$SEGSTORED" "$SEGCTL" "$SB"; do [ -x "$f" ] || { echo "missing $f"; exit 1; }; done

rm -rf "$D" "$OUT"
mkdir -p "$D" "$OUT"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$D"
}
trap cleanup EXIT

# start NAME: a segstored on $D/NAME.dat logging to $OUT/NAME.log; sets ADDR.
start() {
  local log=$OUT/$1.log port=""
  "$SEGSTORED" --listen 127.0.0.1:0 --admin-listen off --data "$D/$1.dat" --file-size "$FILE_SIZE" \
    > "$log" 2>&1 &
  PIDS+=($!)
  while :; do
    port=$(sed -n 's/.*serving on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "${PIDS[-1]}" 2>/dev/null || { echo "segstored did not start:"; cat "$log"; exit 1; }
    sleep 0.01
  done
  ADDR=127.0.0.1:$port
}
p99() { jq '[.runs[] | select(.workload == "get")][0].latency.p99_us' "$1"; }

date -u
echo "=== $(git -C "$SRC" rev-parse --short HEAD); $USERS users, gets at $RATE/s"
start source
"$SB" --segstore "$ADDR" --users "$USERS" --json-file "$OUT/load.json" load | tail -1
"$SB" --segstore "$ADDR" --users "$USERS" --rate "$RATE" --seconds "$SECONDS_RUN" \
  --json-file "$OUT/get-alone.json" get | tail -1

pace=()
[ "$BACKUP_RATE" != 0 ] && pace=(--rate-users "$BACKUP_RATE")
"$SEGCTL" --server "$ADDR" --json backup --no-progress "${pace[@]}" "$D/backup.segbak" \
  > "$OUT/backup.json" 2> "$OUT/backup.err" &
BACKUP=$!
sleep 1
"$SB" --segstore "$ADDR" --users "$USERS" --rate "$RATE" --seconds "$SECONDS_RUN" \
  --json-file "$OUT/get-during.json" get | tail -1
kill -0 "$BACKUP" 2>/dev/null && during=yes || during="no (the backup ended first: make USERS larger)"
wait "$BACKUP"

start target
"$SEGCTL" --server "$ADDR" --json restore --no-progress "$D/backup.segbak" > "$OUT/restore.json"
date -u

{
  echo "issue 22: backup and restore of $USERS reference users"
  jq -r '"backup:  \(.users) users in \(.seconds | . * 10 | round / 10) s: \(.users / .seconds | round) users/s, \(.raw_bytes / .seconds / 1e6 | . * 10 | round / 10) MB/s of profiles (\(.raw_bytes / 1e6 | round) MB, \(.file_bytes / 1e6 | round) MB compressed)"' "$OUT/backup.json"
  jq -r '"restore: \(.users) users in \(.seconds | . * 10 | round / 10) s: \(.users / .seconds | round) users/s, \(.bytes / .seconds / 1e6 | . * 10 | round / 10) MB/s of backup file"' "$OUT/restore.json"
  echo "get p99 at $RATE/s: alone $(p99 "$OUT/get-alone.json") us, during the backup $(p99 "$OUT/get-during.json") us (backup still running at the end: $during)"
} | tee "$OUT/summary.txt"
