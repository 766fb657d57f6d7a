#!/usr/bin/env bash
# Writes the format-v3 fixture with the release that writes format version 3
# (segstored 0.3.0: record kind 3, a put naming a reference, and profile
# codec 3, a linked profile's group section). One 16 MiB data file, written
# first by segstored as a single server (codec-1 bodies outside every group,
# codec-3 bodies in one, groups made, moved, dissolved and deleted with
# `segctl link`, `unlink` and `delete`), then by segstored as a one-node
# cluster with a log (codec-2 and codec-3 bodies through its applier: link
# steps as `link_step` log entries, and one checkpoint record per log
# partition); stopped with SIGTERM each time, then gzipped. Run once, by
# hand, with the binaries of the release whose format is being pinned; never
# again for the same version (the point is that later releases read what
# this one wrote).
#
#   tests/data/format-v3/make_fixture.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds src/server/segstored, src/tools/segctl and
# tests/support/segstore-test-kafka (librdkafka's mock Kafka cluster, the
# cluster's log); etcd is Debian's /usr/bin/etcd, one member on loopback.
# Everything listens on 127.0.0.1; everything started here is stopped by its
# PID, and the temp dirs go. OUT_DIR gets segstore.dat.gz,
# segstore.dat.sha256, fixture-single.toml, fixture-cluster.toml (as run:
# the etcd and Kafka ports are the run's), segstored-single.log,
# segstored-cluster.log, transcript.txt (every segctl command run here and
# what it answered, the links' expiries among them) and
# stats-before-stop.json (the node's figures just before its stop).
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
    for f in "$work"/*.log "$work"/transcript.txt; do
      [ -f "$f" ] && { echo "== $f" >&2; tail -n 40 "$f" >&2; }
    done
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
# segctl on the running segstored: the command, the time it was sent (UTC)
# and its answer go to transcript.txt; a non-zero exit fails the run.
transcript="$work/transcript.txt"
ctl() {
  printf '\n$ segctl %s   # %s\n' "$*" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$transcript"
  "$segctl" --server "127.0.0.1:$port" "$@" 2>&1 | tee -a "$transcript"
}
# The same for a command whose answer may be "not found" (exit 3).
ctl_may_miss() {
  printf '\n$ segctl %s   # %s\n' "$*" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$transcript"
  local rc=0
  "$segctl" --server "127.0.0.1:$port" "$@" >> "$transcript" 2>&1 || rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 3 ] || { echo "segctl $* exited $rc" >&2; exit 1; }
  echo "(exit $rc)" >> "$transcript"
}

# Defragmentation and the expiry sweeper off: the file keeps every version
# written (old versions, tombstones, expired links and their records), so
# that reading it exercises recovery's choice of the newest version and the
# read path's judging of links, not only the newest bytes.
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

# ---- a. A single server: codec-1 bodies outside every group, codec-3
# bodies (no log position) in one; members' records of kind 3.
start_segstored fixture-single.toml segstored-single.log
echo "== a. single server" >> "$transcript"

# plain: never linked (codec 1 to the end). plain-joins: codec 1 here,
# linked through the log in phase b.
ctl upsert plain 50@4000000000,a1=1 51@never
ctl upsert plain-joins 60@never,a2=6

# Group A: master-a and its members, made with link; one link with a long
# TTL, one made through a member, a member written again after its link,
# one unlinked, one deleted (its expiring link comes last, below).
ctl upsert master-a 1@4000000000,a1=10 2@4000003600 5@never,a2=50
ctl upsert member-a1 1@4000007200,a1=11 3@4000000000
ctl upsert member-a2 2@4000003600,a2=12 4@never,a1=13
ctl upsert member-a3 3@4000000000,a1=33 8@4000000000
ctl upsert left-a 9@never
ctl upsert erased-a 10@never
ctl upsert lapsed-a 1@4100000000,a1=77 11@4000000000
ctl link member-a1 master-a
ctl link member-a2 master-a --ttl 26000d
ctl link member-a3 member-a1     # through a member: joins master-a
ctl link left-a master-a
ctl link erased-a master-a
ctl upsert member-a1 6@4000010800,a1=16   # a member written again keeps its link
ctl unlink left-a
ctl delete erased-a

# A group moved under a new master: master-old's group moves with it under
# master-new, which has no profile of its own (a link writes no segment).
ctl upsert master-old 20@4000000000
ctl upsert member-o1 21@never
ctl upsert member-o2 22@4000000000,a1=22
ctl link member-o1 master-old
ctl link member-o2 master-old --ttl 26000d
ctl link master-old master-new

# A group dissolved by its master's unlink.
ctl upsert master-d 40@never
ctl upsert member-d1 41@never
ctl link member-d1 master-d
ctl unlink master-d

# A group deleted by its master's delete (below, once lapsed-g's link has
# expired: lapsed-g is then in no group, and survives the delete).
ctl upsert master-gone 30@never
ctl upsert member-g1 31@never
ctl upsert member-g2 32@never
ctl upsert lapsed-g 33@never
ctl link member-g1 master-gone
ctl link member-g2 master-gone

# Links that expire 20 s after they are made: the last link steps on
# master-a and master-gone, so their lists keep the expired links (nothing
# later drops them; the sweeper is off). Their expiries are in the
# transcript (links, at once).
ctl link lapsed-a master-a --ttl 20s
ctl link lapsed-g master-gone --ttl 20s
ctl links master-a --json
ctl links master-gone --json
ctl links master-new --json
sleep 22
ctl delete master-gone

for u in plain plain-joins master-a member-a1 member-a2 member-a3 left-a lapsed-a master-old \
  member-o1 member-o2 master-new master-d member-d1 lapsed-g erased-a master-gone member-g1 \
  member-g2; do
  ctl_may_miss get "$u"
  ctl_may_miss master-of "$u"
done
ctl links master-a --json
ctl links master-new --json

stop_segstored segstored-single.log

# ---- b. The same data file as a one-node cluster with a log.
echo "== b. one-node cluster with a log" >> "$transcript"
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
  stats=$("$segctl" --server "127.0.0.1:$port" stats --json 2>/dev/null || true)
  if grep -Eq '"cluster[._]registered": ?1([^0-9]|$)' <<<"$stats" &&
     grep -Eq '"replica[._]caught_up": ?1([^0-9]|$)' <<<"$stats"; then
    serving=1
    break
  fi
  sleep 0.1
done
[ -n "$serving" ] || { echo "the cluster node did not serve; stats: $stats" >&2; exit 1; }

# Each write below is entries of the cluster's log: an upsert one, in log
# partition PartitionOf(user) % 4 ("lp"); a link, unlink or a grouped
# user's delete one link_step entry per step, each in the log partition of
# the record it writes (README.md has the users' partitions, the entries'
# offsets and the log positions their records keep).
ctl upsert log-only 70@4000000000,a2=7          # lp 1, offset 0
ctl upsert master-c 80@4000000000,a1=8          # lp 2, offset 0
ctl upsert member-c1 81@never                   # lp 0, offset 0
ctl upsert member-c2 83@4000000000              # lp 0, offset 1
ctl upsert left-c 84@never                      # lp 3, offset 0
ctl upsert erased-c 85@never                    # lp 2, offset 1
ctl link member-c1 master-c                     # list: lp 2, offset 2; name: lp 0, offset 2
ctl link member-c2 master-c --ttl 26000d        # list: lp 2, offset 3; name: lp 0, offset 3
ctl link plain-joins master-c                   # list: lp 2, offset 4; name: lp 0, offset 4
ctl link left-c master-c                        # list: lp 2, offset 5; name: lp 3, offset 1
ctl link erased-c master-c                      # list: lp 2, offset 6; name: lp 2, offset 7
ctl upsert member-c1 82@4000000000              # lp 0, offset 5
ctl unlink left-c                               # drop: lp 2, offset 8; clear: lp 3, offset 2
ctl delete erased-c                             # drop: lp 2, offset 9; delete: lp 2, offset 10
ctl upsert member-a1 7@never                    # lp 0, offset 6: a single server's member
ctl links master-c --json

for u in log-only master-c member-c1 member-c2 plain-joins left-c erased-c member-a1 master-a; do
  ctl_may_miss get "$u"
  ctl_may_miss master-of "$u"
done
ctl get member-a1 --own
ctl_may_miss get master-new --own
ctl connected member-a3 master-a
ctl connected lapsed-a master-a
ctl connected member-c1 plain-joins
ctl connected member-a1 member-c1
"$segctl" --server "127.0.0.1:$port" stats --json > "$work/stats-before-stop.json"

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
  "$work/segstored-cluster.log" "$work/stats-before-stop.json" "$transcript" "$out/"
sha256sum "$work/segstore.dat" | sed 's| .*|  segstore.dat|' > "$out/segstore.dat.sha256"
