#!/usr/bin/env bash
# Issue 20's benchmarks (bench/RESULTS.md, "profile bridging's costs"): run
# on a quiet machine from the source tree, with OLD_BUILD the build directory
# of the commit before issue 20 (ad0e1d2). Output in $OUT.
set -euo pipefail
: "${OLD_BUILD:?the build directory of ad0e1d2}"
OLD=$OLD_BUILD/src/server/segstored
NEW=build/src/server/segstored
OLDPB=$OLD_BUILD/bench/profile_bench
NEWPB=build/bench/profile_bench
SB=build/bench/segbench/segbench
D=${DATA_DIR:-/tmp/issue20-bench}
OUT=${OUT:-/tmp/issue20-out}
mkdir -p "$OUT"
rm -rf "$D"; mkdir -p "$D"/{old,new,k5,k2_10,scale}
PIDS=()
start() {  # name binary port dir
  "$2" --listen 127.0.0.1:$3 --admin-listen off --data "$4/segstore.dat" --file-size 4GiB > "$OUT/$1.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  echo "$pid" > "$OUT/$1.pid"
  for i in $(seq 1 100); do
    if (exec 3<>/dev/tcp/127.0.0.1/$3) 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "server $1 did not start"; exit 1
}
stop() {  # name
  local pid; pid=$(cat "$OUT/$1.pid")
  kill -TERM "$pid"; wait "$pid" || true
}
trap 'for p in "${PIDS[@]}"; do kill -TERM $p 2>/dev/null || true; done' EXIT
date -u
echo "=== unlinked get: before issue 20 (ad0e1d2) vs main"
start old "$OLD" 17720 "$D/old"
start new "$NEW" 17721 "$D/new"
"$SB" --segstore 127.0.0.1:17721 --users 100000 --connections 16 --seconds 10 --json-file "$OUT/limits.json" limits load
"$SB" --segstore 127.0.0.1:17720 --users 100000 --connections 16 --seconds 10 load
for r in 1 2 3; do
  for who in old new; do
    port=17720; [ $who = new ] && port=17721
    echo "--- round $r: $who"
    "$SB" --segstore 127.0.0.1:$port --users 100000 --connections 16 --seconds 10 --warmup 3 \
      --json-file "$OUT/get-$who-$r.json" get
  done
done
stop old; stop new
echo "=== profile_bench: before issue 20 vs main"
for r in 1 2; do
  for who in old new; do
    pb=$OLDPB; [ $who = new ] && pb=$NEWPB
    echo "--- round $r: $who"
    "$pb" --benchmark_filter='BM_GetAnswer|BM_DecodeAndSelectLive' --benchmark_min_time=1 2>&1 | grep -E "^BM_"
  done
done
echo "=== k = 5"
start k5 "$NEW" 17722 "$D/k5"
"$SB" --segstore 127.0.0.1:17722 --users 100000 --connections 16 --seconds 15 --group-size 5 \
  --json-file "$OUT/k5.json" load link get get-linked get-50 get-linked-50
echo "=== k = 5, ids only"
"$SB" --segstore 127.0.0.1:17722 --users 100000 --connections 16 --seconds 15 --group-size 5 --ids-only \
  --json-file "$OUT/k5-ids.json" link get get-linked get-50 get-linked-50
echo "=== k = 5, full answers, both open loop at 4,000/s (below the linked gets' maximum)"
"$SB" --segstore 127.0.0.1:17722 --users 100000 --connections 16 --seconds 15 --group-size 5 --rate 4000 \
  --json-file "$OUT/k5-4000.json" link get-50 get-linked-50
stop k5
echo "=== groups of 2 to 10"
start k2_10 "$NEW" 17723 "$D/k2_10"
"$SB" --segstore 127.0.0.1:17723 --users 100000 --connections 16 --seconds 15 \
  --json-file "$OUT/k2_10.json" load link get get-linked get-50 get-linked-50
"$SB" --segstore 127.0.0.1:17723 --users 100000 --connections 16 --seconds 15 --rate 4000 \
  --json-file "$OUT/k2_10-4000.json" link get-50 get-linked-50
stop k2_10
echo "=== DRAM per link at 400,000 users (200,000 linked, groups of 2 to 10)"
start scale "$NEW" 17724 "$D/scale"
"$SB" --segstore 127.0.0.1:17724 --users 400000 --connections 16 --seconds 5 \
  --json-file "$OUT/scale.json" load link
stop scale
date -u
rm -rf "$D"
