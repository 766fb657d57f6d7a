#!/usr/bin/env bash
# Issue 22's restart figures: how long a start takes, and how much of the
# device it reads, on a data file filled with the reference workload: after
# a clean stop (loading the index checkpoint), and after a crash (no usable
# checkpoint: the write blocks' summaries read) against reading every write
# block whole, as every start did before; in one run, from the repository's
# root:
#   - segbench limits (the device, the ping round trip);
#   - one segstored (storage.index_checkpoint "auto": <data>.index) on a
#     fresh FILE_SIZE data file, loaded with USERS reference users
#     (segbench load), left until it stops defragmenting;
#   - ROUNDS rounds of, each start after dropping the page cache:
#     checkpoint: start after a clean stop (it loads the checkpoint), stop;
#     crash: remove the checkpoint (a crash after any write leaves it
#       stale), start (it reads the block summaries), SIGKILL;
#     whole: remove it, start with storage.block_summaries = false (every
#       block in use read whole), stop (writing the checkpoint again);
#   - for every start: the recovery's own time and what it read (its log
#     line), the time from exec to serving, and the bytes the process read
#     (/proc/PID/io read_bytes: also its binary and libraries); for every
#     clean stop: how long writing the checkpoint took and its size.
# Then a summary (also $OUT/summary.txt); the servers' logs are in $OUT.
# Needs root (to drop the page cache: /proc/sys/vm/drop_caches), jq.
#
# Usage: bench/issue22/restart.sh
# Environment (defaults): BUILD (build-rel: a Release build holding
#   src/server/segstored and bench/segbench/segbench) USERS (1700000: about
#   4 GB of records) FILE_SIZE (5GiB) ROUNDS (3) DATA_DIR
#   (/tmp/issue22-restart) OUT (/tmp/issue22-restart-out) KEEP (set: leave the
#   data file behind, for profiling a start by hand) REUSE (set: start from the
#   data file and OUT/load.json a KEEP run left: no load).
# A smoke run: USERS=20000 FILE_SIZE=256MiB ROUNDS=1 bench/issue22/restart.sh
set -euo pipefail

SRC=$(pwd)
[ -f "$SRC/bench/issue22/restart.sh" ] || { echo "run from the repository's root"; exit 2; }
BUILD=${BUILD:-build-rel}
USERS=${USERS:-1700000}
FILE_SIZE=${FILE_SIZE:-5GiB}
ROUNDS=${ROUNDS:-3}
D=${DATA_DIR:-/tmp/issue22-restart}
OUT=${OUT:-/tmp/issue22-restart-out}
SEGSTORED=$BUILD/src/server/segstored
SB=$BUILD/bench/segbench/segbench
for f in "$SEGSTORED" "$SB"; do [ -x "$f" ] || { echo "missing $f"; exit 1; }; done
[ -w /proc/sys/vm/drop_caches ] || { echo "needs root: drops the page cache before each start"; exit 1; }

REUSED=""
if [ -n "${REUSE:-}" ] && [ -f "$D/segstore.dat" ] && [ -f "$OUT/load.json" ]; then
  # The data file a KEEP run left, and that run's load figures.
  REUSED=$(mktemp -d)
  cp "$OUT/load.json" "$REUSED/"
  rm -rf "$OUT"
else
  rm -rf "$D" "$OUT"
fi
mkdir -p "$D" "$OUT"
DATA=$D/segstore.dat
PID=""
ADDR=""
EXTRA=()
STARTED=""
cleanup() {
  if [ -n "$PID" ]; then kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  [ -n "${KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT

# start NAME: starts segstored on $DATA, logging to $OUT/NAME.log; waits
# until it serves; sets PID and ADDR, and STARTED to "seconds-to-serving
# read-bytes".
start() {
  local log=$OUT/$1.log port="" t0 t1
  t0=$(date +%s.%N)
  "$SEGSTORED" "${EXTRA[@]}" --listen 127.0.0.1:0 --admin-listen off --data "$DATA" \
    --file-size "$FILE_SIZE" > "$log" 2>&1 &
  PID=$!
  while :; do
    port=$(sed -n 's/.*serving on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$PID" 2>/dev/null || { echo "segstored did not start:"; cat "$log"; exit 1; }
    sleep 0.01
  done
  t1=$(date +%s.%N)
  ADDR=127.0.0.1:$port
  STARTED="$(echo "$t1 - $t0" | bc) $(awk '/^read_bytes/ { print $2 }' "/proc/$PID/io")"
}
stop() {
  kill -TERM "$PID"
  wait "$PID" || true
  PID=""
}
recovery_line() {  # log
  grep -m1 'recovered .* in [0-9.]* s' "$1"
}
defrag_blocks() {
  "$BUILD/src/tools/segctl" --server "$ADDR" --json stats 2>/dev/null | jq '."storage.defrag_blocks"'
}

date -u
echo "=== $(git -C "$SRC" rev-parse --short HEAD); $USERS users in a $FILE_SIZE data file"
start load
"$SB" --segstore "$ADDR" --seconds 3 --warmup 0.5 --limits-file-mib 1024 --limits-dir "$D" \
  --json-file "$OUT/limits.json" limits | tail -3
if [ -n "$REUSED" ]; then
  cp "$REUSED/load.json" "$OUT/"
  echo "reusing the data file and load figures of an earlier KEEP run"
else
  "$SB" --segstore "$ADDR" --users "$USERS" --json-file "$OUT/load.json" load | tail -1
  # Until it has defragmented nothing for 5 s (at most 300 s).
  last="" quiet=0 waited=0
  while [ "$quiet" -lt 5 ] && [ "$waited" -lt 300 ]; do
    now=$(defrag_blocks)
    if [ "$now" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0; fi
    last=$now
    sleep 1
    waited=$((waited + 1))
  done
  echo "settled after $waited s"
fi
stop
stat -c %s "$DATA.index" > "$OUT/checkpoint-size-0"

: > "$OUT/rounds.txt"
printf '[storage]\nblock_summaries = false\n' > "$OUT/whole.toml"
for r in $(seq 1 "$ROUNDS"); do
  # checkpoint: after a clean stop. crash: the checkpoint gone (as a crash
  # after any write leaves it stale), block summaries read. whole: the
  # same with every block read whole, as before summaries.
  for how in checkpoint crash whole; do
    [ "$how" != checkpoint ] && rm -f "$DATA.index"
    [ "$how" = checkpoint ] && [ ! -f "$DATA.index" ] && { echo "no checkpoint after the stop"; exit 1; }
    EXTRA=()
    [ "$how" = whole ] && EXTRA=(--config "$OUT/whole.toml")
    sync
    echo 3 > /proc/sys/vm/drop_caches
    start "$how-$r"
    read -r to_serving read_bytes <<< "$STARTED"
    line=$(recovery_line "$OUT/$how-$r.log")
    seconds=$(echo "$line" | sed -n 's/.* recovered [^ ]* in \([0-9.]*\) s.*/\1/p')
    if [ "$how" = crash ]; then
      kill -KILL "$PID"
      wait "$PID" || true
      PID=""
    else
      stop
    fi
    # (none after a crash)
    written=$({ grep -m1 'index checkpoint .* written in' "$OUT/$how-$r.log" || true; } |
      sed -n 's/.* written in \([0-9.]*\) s.*/\1/p')
    size=0
    [ -f "$DATA.index" ] && size=$(stat -c %s "$DATA.index")
    echo "$r $how $seconds $to_serving $read_bytes ${written:-?} $size" | tee -a "$OUT/rounds.txt"
    echo "  $line"
  done
done
date -u

python3 - "$OUT" "$USERS" <<'EOF' | tee "$OUT/summary.txt"
import json, os, re, statistics, sys

out, users = sys.argv[1], int(sys.argv[2])
rows = [l.split() for l in open(os.path.join(out, "rounds.txt")) if l.strip()]
load = json.load(open(os.path.join(out, "load.json")))
limits = json.load(open(os.path.join(out, "limits.json")))
print(f"issue 22: a clean restart, loading the index checkpoint against scanning; {users:,} users")
m = limits["machine"]
print(f"machine: {m['cores']} cores ({m['cpu']}), kernel {m['kernel']}; data on {m['storage']}")
dev = limits["limits"]["device"]
print(f"limits: device {dev['reads_per_second']:,.0f} 4 KiB reads/s at QD{dev['queue_depth']}"
      f" (p50 {dev['latency']['p50_us']:.1f} us)")
print(f"loaded: {load['users']:,} users")
# What recovery itself reads: every block's first sector, then either the
# checkpoint or every block in use whole. (The process's read_bytes also
# counts its binary and libraries, read afresh after the cache drop.)
block_size = 1 << 20  # the default, when the log is of a reused file (no "formatted" line)
for line in open(os.path.join(out, "load.log")):
    m = re.search(r"write blocks of (\d+) KiB", line)
    if m:
        block_size = int(m.group(1)) << 10
by = {"checkpoint": [], "crash": [], "whole": []}
previous_size = int(open(os.path.join(out, "checkpoint-size-0")).read())
device_bytes = None
for r, how, seconds, to_serving, read_bytes, written, size in rows:
    text = open(os.path.join(out, f"{how}-{r}.log")).read()
    m = re.search(r"tombstones, (\d+) of (\d+) write blocks in use", text)
    in_use, headers = int(m.group(1)), int(m.group(2))
    device_bytes = (headers + 1) * block_size
    if how == "checkpoint":
        # Every block's first sector, and the file the stop before wrote.
        device_read = headers * 4096 + previous_size
    else:
        # The recovery's own count (its log line): headers, summaries, whole blocks.
        device_read = float(re.search(r"; ([0-9.]+) MB read", text).group(1)) * 1e6
    by[how].append((float(seconds), float(to_serving), int(read_bytes), written, int(size),
                    device_read, in_use * block_size))
    if int(size):
        previous_size = int(size)
for how, xs in by.items():
    print(f"  {how:10} recovery {statistics.median(x[0] for x in xs):7.3f} s (rounds "
          f"{[x[0] for x in xs]}), exec to serving {statistics.median(x[1] for x in xs):7.3f} s, "
          f"recovery read {statistics.median(x[5] for x in xs) / 1e6:9.1f} MB "
          f"({statistics.median(x[5] for x in xs) / device_bytes:.2%} of the device's bytes, "
          f"{statistics.median(x[5] / x[6] for x in xs):.2%} of the blocks in use), "
          f"process read {statistics.median(x[2] for x in xs) / 1e6:9.1f} MB")
c = statistics.median(x[0] for x in by["checkpoint"])
k = statistics.median(x[0] for x in by["crash"])
w = statistics.median(x[0] for x in by["whole"])
cs = statistics.median(x[1] for x in by["checkpoint"])
ws = statistics.median(x[1] for x in by["whole"])
print(f"  clean restart, whole scan / checkpoint: recovery {w / c:.1f}x, exec to serving "
      f"{ws / cs:.1f}x (goal: at least 20x)")
print(f"  crash recovery: {k:.3f} s from summaries against {w:.3f} s reading every block whole "
      f"({w / k:.1f}x); read {statistics.median(x[5] for x in by['crash']) / device_bytes:.2%} "
      f"of the device's bytes (goal: at most 5 %)")
print(f"  writing the checkpoint at a stop: {[x[3] for x in by['whole']]} s; "
      f"its size {by['whole'][0][4] / 1e6:.1f} MB ({by['whole'][0][4] / users:.1f} B a user)")
EOF
