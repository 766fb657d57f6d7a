#!/usr/bin/env bash
# Writes the format-v2 fixture with the release that writes format version 2
# (segstored 0.2.0: profile codec 2, a record body that remembers the log
# position of the last cluster log entry applied to it). One 16 MiB data
# file, written first by segstored as a single server (codec-1 bodies in a
# version-2 file), then by segstored as a one-node cluster with a log (codec-2
# bodies through its applier, and one checkpoint record per log partition);
# stopped with SIGTERM each time, then gzipped. Run once, by hand, with the
# binaries of the release whose format is being pinned; never again for the
# same version (the point is that later releases read what this one wrote).
#
#   tests/data/format-v2/make_fixture.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds src/server/segstored, src/tools/segctl and
# tests/support/segstore-test-kafka (librdkafka's mock Kafka cluster, the
# cluster's log); etcd is Debian's /usr/bin/etcd, one member on loopback.
# Everything listens on 127.0.0.1; everything started here is stopped by its
# PID, and the temp dirs go. OUT_DIR gets segstore.dat.gz,
# segstore.dat.sha256, fixture-single.toml, fixture-cluster.toml (as run:
# the etcd and Kafka ports are the run's), segstored-single.log,
# segstored-cluster.log and stats-before-stop.json (the node's figures
# just before its stop: the applier's lanes among them).
set -euo pipefail

build=$(realpath "$1")
out=$(realpath -m "$2")
segstored="$build/src/server/segstored"
segctl="$build/src/tools/segctl"
kafka="$build/tests/support/segstore-test-kafka"
etcd=/usr/bin/etcd
for b in "$segstored" "$segctl" "$kafka" "$etcd"; do
  [ -x "$b" ] || { echo "make_fixture.sh: $b is missing" >&2; exit 1; }
done
mkdir -p "$out"
work=$(mktemp -d "$out/work.XXXXXX")

# The processes this script starts, stopped by their PIDs on any exit.
segstored_pid=""
etcd_pid=""
kafka_pid=""
cleanup() {
  local rc=$?
  if [ -n "$segstored_pid" ] && kill -0 "$segstored_pid" 2>/dev/null; then
    kill -TERM "$segstored_pid" 2>/dev/null || true
    wait "$segstored_pid" 2>/dev/null || true
  fi
  if [ -n "$kafka_pid" ] && kill -0 "$kafka_pid" 2>/dev/null; then
    kill -TERM "$kafka_pid" 2>/dev/null || true
    wait "$kafka_pid" 2>/dev/null || true
  fi
  if [ -n "$etcd_pid" ] && kill -0 "$etcd_pid" 2>/dev/null; then
    kill -TERM "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
  fi
  if [ $rc -ne 0 ]; then
    echo "make_fixture.sh: failed (status $rc); logs:" >&2
    for f in "$work"/*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -n 40 "$f" >&2; }; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Starts segstored on $1 (a config file in $work), in $work; sets
# segstored_pid and port.
start_segstored() {
  local config=$1 log=$2
  (cd "$work" && exec "$segstored" --config "$config" > "$log" 2>&1) &
  segstored_pid=$!
  port=""
  for _ in $(seq 1 300); do
    port=$(sed -n 's/.*serving on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$segstored_pid" 2>/dev/null || { echo "segstored exited" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$port" ] || { echo "segstored did not serve" >&2; exit 1; }
}
stop_segstored() {
  local log=$1
  kill -TERM "$segstored_pid"
  wait "$segstored_pid"
  segstored_pid=""
  grep -q "stopped cleanly" "$work/$log"
}
ctl() { "$segctl" --server "127.0.0.1:$port" "$@"; }

# Defragmentation and the expiry sweeper off: the file keeps every version
# written (old versions, tombstones, expired segments), so that reading it
# exercises recovery's choice of the newest version and the read path's
# hiding of expired segments, not only the newest bytes.
common='[admin]
listen = "off"

[storage]
path = "segstore.dat"
file_size = "16MiB"
write_block_size = "64KiB"
durability = "commit"
background_defrag = false

[profile]
sweeper = false'

cat > "$work/fixture-single.toml" <<TOML
[server]
listen = "127.0.0.1:0"
threads = 2

$common
TOML

# ---- a. A single server: codec-1 bodies in a version-2 file.
start_segstored fixture-single.toml segstored-single.log

# single-only: never touched by the log (codec 1 to the end): second-
# precision expiries, attributes, the largest ID and expiry there are.
ctl upsert single-only 0@4000000001 1@4000000002,a1=7 7@4000012345,a2=65535 \
  1000@never,a1=0,a2=4294967295 18446744073709551615@4294967295
# handed-over: written here, updated through the log in phase b (codec 2 then).
ctl upsert handed-over 1@4000003600 2@4000007200,a1=1 3@never
# single-deleted: a tombstone written by the single server.
ctl upsert single-deleted 1@never 2@4000000000
ctl delete single-deleted
# dropped-by-log: written here, deleted through the log in phase b.
ctl upsert dropped-by-log 5@4000000000 6@never

stop_segstored segstored-single.log

# ---- b. The same data file as a one-node cluster with a log.
# etcd: one member on two free loopback ports, its own data dir.
read -r etcd_client etcd_peer < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
for s in socks: s.close()')
"$etcd" --name m0 --data-dir "$work/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_client" \
  --advertise-client-urls "http://127.0.0.1:$etcd_client" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "m0=http://127.0.0.1:$etcd_peer" \
  --initial-cluster-state new --initial-cluster-token "segstore-fixture-$$" \
  --heartbeat-interval 50 --election-timeout 500 \
  --logger zap --log-outputs stderr --log-level error \
  < /dev/null > "$work/etcd.log" 2>&1 &
etcd_pid=$!
healthy=""
for _ in $(seq 1 600); do
  if curl -sf --max-time 2 "http://127.0.0.1:$etcd_client/health" | grep -q '"health":"true"'; then
    healthy=1
    break
  fi
  kill -0 "$etcd_pid" 2>/dev/null || { echo "etcd exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$healthy" ] || { echo "etcd is not healthy" >&2; exit 1; }

# The cluster's log: the mock Kafka cluster, one broker, topic "segstore"
# with 4 partitions. It runs until its stdin closes.
mkfifo "$work/kafka.in" "$work/kafka.out"
"$kafka" --brokers 1 --topic segstore --partitions 4 \
  < "$work/kafka.in" > "$work/kafka.out" 2> "$work/kafka.log" &
kafka_pid=$!
exec {kafka_in}> "$work/kafka.in"
exec {kafka_out}< "$work/kafka.out"
read -r -t 30 word brokers <&"$kafka_out"
[ "$word" = bootstrap ] && [ -n "$brokers" ] || { echo "no bootstrap from the mock" >&2; exit 1; }

cat > "$work/fixture-cluster.toml" <<TOML
[server]
listen = "127.0.0.1:0"
threads = 2

$common

[cluster]
etcd_endpoints = ["http://127.0.0.1:$etcd_client"]
node_id = "fixture-node"
initial_nodes = 1

[cluster_log]
brokers = "$brokers"
topic = "segstore"
partitions = 4
checkpoint_interval_ms = 100
TOML

start_segstored fixture-cluster.toml segstored-cluster.log
# Serving once registered, with a map, and caught up with the (empty) log.
serving=""
for _ in $(seq 1 600); do
  stats=$(ctl stats --json 2>/dev/null || true)
  if grep -Eq '"cluster[._]registered": ?1([^0-9]|$)' <<<"$stats" &&
     grep -Eq '"replica[._]caught_up": ?1([^0-9]|$)' <<<"$stats"; then
    serving=1
    break
  fi
  sleep 0.1
done
[ -n "$serving" ] || { echo "the cluster node did not serve; stats: $stats" >&2; exit 1; }

# Each write below is one entry of log partition PartitionOf(user) % 4, at
# the next offset of that log partition (README.md has the users' routing
# partitions, the entries' offsets and the log positions their records keep).
ctl upsert early-bird 1@4000000000                                  # lp 0, offset 0
ctl upsert set-trimmed 100@4000060800,a1=7 200@4000000059,a2=65535 \
  300@never,a1=0,a2=4294967295 9007199254740993@4000000003          # lp 3, offset 0
ctl upsert counted 7@4000000000 8@never,a1=3                        # lp 3, offset 1
ctl upsert counted --mode add 7@+1h 8@+1h                           # lp 3, offset 2
ctl upsert counted --mode add 7@+1h                                 # lp 3, offset 3
ctl upsert handed-over 2@4000010800 4@4000014400,a2=9               # lp 0, offset 1
ctl remove handed-over 1                                            # lp 0, offset 2
# Removes nothing (the profile holds no segment 99, none has expired): the
# entry is applied and writes nothing, so the record keeps position 3.
ctl remove handed-over 99                                           # lp 0, offset 3
ctl delete dropped-by-log                                           # lp 2, offset 0
ctl upsert reborn 1@never                                           # lp 1, offset 0
ctl delete reborn                                                   # lp 1, offset 1
ctl upsert reborn 2@4000000000,a1=5                                 # lp 1, offset 2
ctl trim set-trimmed --before 4000000059                            # lp 3, offset 4
ctl upsert fading 10@never 20@4000000000 11@+2s 21@+2s,a1=9         # lp 2, offset 1
sleep 4
for u in early-bird set-trimmed counted handed-over reborn fading single-only; do ctl get "$u"; done
for u in dropped-by-log single-deleted; do ctl get "$u" || true; done
ctl stats --json > "$work/stats-before-stop.json"

# ---- c. A clean stop writes the last checkpoints.
stop_segstored segstored-cluster.log
exec {kafka_in}>&-   # the end of its stdin ends the mock
wait "$kafka_pid" || true
kafka_pid=""
exec {kafka_out}<&-
kill -TERM "$etcd_pid"
wait "$etcd_pid" || true
etcd_pid=""

gzip -9 -n -c "$work/segstore.dat" > "$out/segstore.dat.gz"
cp "$work/fixture-single.toml" "$work/fixture-cluster.toml" "$work/segstored-single.log" \
  "$work/segstored-cluster.log" "$work/stats-before-stop.json" "$out/"
sha256sum "$work/segstore.dat" | sed 's| .*|  segstore.dat|' > "$out/segstore.dat.sha256"
