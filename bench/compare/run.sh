#!/usr/bin/env bash
# segstore beside Redis 7.0 on the reference workload, on this machine, in one
# invocation: installs Redis from Debian (redis-tools ships its server) and
# hiredis, builds segstored and segbench (Release), starts both servers on
# loopback on free ports, and runs segbench against both, interleaved: each
# workload on segstore, then on Redis (one hash per user: field = segment ID,
# value = expiry; HGETALL, and Lua scripts for live-only reads,
# upsert-with-trim and trim). Prints both rows, the ratios, each server's CPU
# time per request, and memory plus disk per user.
#
#   bench/compare/run.sh                       # 100,000 users, 20 s a run
#   bench/compare/run.sh --users 500000        # the full size
#   bench/compare/run.sh --seconds 5 -- get upsert   # only these workloads
#
# Options: --users N, --seconds S, --connections C, --depth D, --data DIR
# (where segstore's data file, Redis's working directory and the results go;
# default /var/tmp/segbench-compare), --build DIR (default build-compare; a
# new one is configured as Release, an existing one is used as it is).
# Anything after `--` replaces the workload list (default: all).
# Results: DIR/result.txt (the table) and DIR/result.json.
# Both servers are stopped on exit, by their PIDs; the data file is kept for
# inspection and replaced on the next run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
users=100000
seconds=20
connections=32
depth=1
data=/var/tmp/segbench-compare
build="$root/build-compare"
workloads=(all)
while [ $# -gt 0 ]; do
  case "$1" in
    --users) users=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --) shift; workloads=("$@"); break ;;
    *) echo "run.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

"$root/scripts/install-deps.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSEGSTORE_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build" -j2 --target segstored segbench

mkdir -p "$data"
data=$(cd "$data" && pwd)  # absolute: Redis runs from inside it
rm -f "$data/segstore.dat" "$data/dump.rdb"
segstore_pid=""
redis_pid=""
stop() {
  [ -n "$segstore_pid" ] && kill "$segstore_pid" 2>/dev/null && wait "$segstore_pid" 2>/dev/null
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  return 0
}
trap stop EXIT

# segstore: port 0 picks a free port; its log says which.
file_gib=$(( users / 50000 + 2 ))
"$build/src/server/segstored" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --data "$data/segstore.dat" \
  --file-size "${file_gib}GiB" >"$data/segstored.log" 2>&1 &
segstore_pid=$!
segstore_port=""
for _ in $(seq 1 600); do
  segstore_port=$(sed -n 's/.*serving on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$data/segstored.log" | head -1)
  [ -n "$segstore_port" ] && break
  kill -0 "$segstore_pid" 2>/dev/null || { cat "$data/segstored.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$segstore_port" ] || { echo "run.sh: segstored did not start" >&2; exit 1; }

# Redis: no persistence (it serves from memory; segstore reads its device).
# Debian's redis-tools ships the server as redis-check-rdb: it serves when
# its argv[0] is redis-server.
redis_bin=$(command -v redis-server || true)
[ -n "$redis_bin" ] || redis_bin=/usr/bin/redis-check-rdb
redis_port=""
for _ in 1 2 3 4 5; do
  port=$(( 20000 + RANDOM % 30000 ))
  ( cd "$data" && exec -a redis-server "$redis_bin" --port "$port" --bind 127.0.0.1 \
      --save "" --appendonly no --daemonize no --logfile "$data/redis.log" ) &
  redis_pid=$!
  for _ in $(seq 1 100); do
    kill -0 "$redis_pid" 2>/dev/null || break
    # Ours, not another server already on that port.
    if [ "$(redis-cli -p "$port" INFO server 2>/dev/null | sed -n 's/^process_id:\([0-9]*\).*/\1/p')" = "$redis_pid" ]; then
      redis_port=$port
      break
    fi
    sleep 0.1
  done
  [ -n "$redis_port" ] && break
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=""
done
[ -n "$redis_port" ] || { echo "run.sh: redis did not start (see $data/redis.log)" >&2; exit 1; }

echo "run.sh: segstored on 127.0.0.1:$segstore_port (pid $segstore_pid), redis on 127.0.0.1:$redis_port (pid $redis_pid)" >&2
"$build/bench/segbench/segbench" --segstore "127.0.0.1:$segstore_port" --redis "127.0.0.1:$redis_port" \
  --users "$users" --seconds "$seconds" --connections "$connections" --depth "$depth" \
  --limits-dir "$data" --json-file "$data/result.json" "${workloads[@]}" | tee "$data/result.txt"
