#!/usr/bin/env bash
# Writes the format-v4 fixture with the release that writes format version 4
# (segstored 0.4.0: profile codec 4, a profile's fields section, and the
# field name table's records under the reserved keys FF 00 field-name:N).
# One 16 MiB data file, written first by segstored as a single server
# (codec-4 bodies without a log position: fields of every type, with and
# without expiry, set, deleted, incremented with a cap and in fixed and
# sliding windows, kept by field_max, on a profile of fields alone and on a
# linked group's master; fields that expired, still in their records), then
# by segstored as a one-node cluster with a log (codec-4 bodies with log
# positions, through its applier: field_set, field_del, field_incr and
# field_max entries, a linked user's under its master; one checkpoint record
# per log partition); stopped with SIGTERM each time, then gzipped. Run
# once, by hand, with the binaries of the release whose format is being
# pinned; never again for the same version (the point is that later
# releases read what this one wrote).
#
#   tests/data/format-v4/make_fixture.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds src/server/segstored, src/tools/segctl and
# tests/support/segstore-test-kafka (librdkafka's mock Kafka cluster, the
# cluster's log); etcd is Debian's /usr/bin/etcd, one member on loopback.
# Everything listens on 127.0.0.1; everything started here is stopped by its
# PID, and the temp dirs go. OUT_DIR gets segstore.dat.gz,
# segstore.dat.sha256, fixture-single.toml, fixture-cluster.toml (as run:
# the etcd and Kafka ports are the run's), segstored-single.log,
# segstored-cluster.log, transcript.txt (every segctl command run here and
# what it answered, the fields' expiries among them) and
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

# A field write registers the names it stored inline in the store's name
# table (src/profile/field_names.h) once it is answered, asynchronously: a
# record and a flush. The pause after each field write lets that finish, so
# that the next write naming the same field names it by number, whatever
# the machine's speed.
settle() { sleep 0.5; }
fctl() {
  ctl "$@"
  settle
}

# Defragmentation and the expiry sweeper off: the file keeps every version
# written (old versions, tombstones, expired fields in their records), so
# that reading it exercises recovery's choice of the newest version and the
# read path's judging of fields' expiries, not only the newest bytes.
# max_field_names = 17: the name table stops at 17 numbers, so the names
# first written after the 17th (cap:group, segment_src, gone, note, blip, and
# every name new in phase b) stay inline in every body that holds them,
# however often it is written (ProfileOptions::max_field_names).
common='[admin]
listen = "off"

[storage]
path = "segstore.dat"
file_size = "16MiB"
write_block_size = "64KiB"
durability = "commit"
background_defrag = false

[profile]
sweeper = false
max_field_names = 17'

cat > "$work/fixture-single.toml" <<TOML
[server]
listen = "127.0.0.1:0"
threads = 2

$common
TOML

# ---- a. A single server: codec-4 bodies without a log position (codec 1,
# and 3 in a group, for the profiles without fields). The comments give the
# name table's numbers as each write registers its new names (in bytewise
# order within a write).
start_segstored fixture-single.toml segstored-single.log
echo "== a. single server" >> "$transcript"

# A profile without fields: codec 1, as every earlier release wrote it.
ctl upsert plain 50@4000000000,a1=1 51@never

# A profile of fields alone, one of each type (an empty string, a name of
# 64 bytes), written twice: the second write names the first one's fields
# by number and its own new ones inline.
long=long-name-01234567890123456789012345678901234567890123456789abcd  # 64 bytes
fctl field-set solo country=str:FR score=double:0.75 visits=int:3 nickname=str: "$long=int:64"
#   country 1, long-name-... 2, nickname 3, score 4, visits 5
fctl field-set solo consent=bytes:00ff10 last_seen=time:4000000000 visits=int:4
#   consent 6, last_seen 7

# Segments and fields: an absolute expiry, a TTL, a field deleted, and the
# last writes of two fields that expire 20 s later (still in the record:
# nothing writes mixed again).
ctl upsert mixed 1@4000000000,a1=1 2@never
fctl field-set mixed country=str:DE tier=int:2          # tier 8
fctl field-set mixed --expiry 4000003600 score=double:-1.5
fctl field-set mixed --ttl 26000d promo=str:spring      # promo 9
fctl field-del mixed tier
fctl field-set mixed --ttl 20s flash=str:gone-soon      # flash 10
fctl incr mixed cap:day --ttl 20s                       # cap:day 11

# Counters: a capped one in a fixed window (its TTL set when made), one in
# a sliding window (every increment sets it again), a negative one that
# never expires; both windows are incremented again after the pause below.
ctl upsert caps 5@never
fctl incr caps cap:c77 --ttl 26000d --cap 3             # 1; cap:c77 12
fctl incr caps cap:c77 --ttl 26000d --cap 3             # 2
fctl incr caps cap:c77 --ttl 26000d --cap 3             # 3
fctl incr caps cap:c77 --ttl 26000d --cap 3             # capped at 3: nothing written
fctl incr caps cap:c78 --ttl 26000d --sliding           # 1; cap:c78 13
fctl incr caps cap:c79 --by=-5                          # -5; cap:c79 14

# field_max: a time, a double, an int; values kept (nothing written) and
# replaced, one with an expiry.
ctl upsert seen 9@4000000000
fctl field-max seen last_seen=time:4000000100                      # replaced: absent
fctl field-max seen last_seen=time:4000000050                      # kept
fctl field-max seen last_seen=time:4000000200 --expiry 4000007200  # replaced, with an expiry
fctl field-max seen best=double:2.5                                # best 15
fctl field-max seen best=double:3.25                               # replaced
fctl field-max seen hits=int:7                                     # hits 16
fctl field-max seen hits=int:5                                     # kept

# A group with fields: a member's own field, written before its link (its
# record keeps it, read with own); the members' field writes change the
# master's fields.
ctl upsert fmaster 100@4000000000
ctl upsert fmember1 101@never
ctl upsert fmember2 102@4000000000,a2=2
fctl field-set fmember2 own_note=str:mine               # own_note 17: the table is full
ctl link fmember1 fmaster
ctl link fmember2 fmaster
fctl incr fmember1 cap:group --ttl 26000d --cap 10      # fmaster's: 1 (cap:group: no number)
fctl incr fmember2 cap:group --ttl 26000d --cap 10      # fmaster's: 2
fctl field-set fmember1 country=str:ES                  # fmaster's
fctl field-set fmaster segment_src=str:dmp              # fmaster's own write

# Tombstones: a profile of fields alone whose last field is deleted, and a
# profile with fields deleted; and a profile of fields alone that all
# expire (no profile, its record void).
fctl field-set dropped-fields gone=int:1
fctl field-del dropped-fields gone                      # the profile is removed
ctl upsert erased-fields 200@never
fctl field-set erased-fields note=str:bye
ctl delete erased-fields
fctl field-set lapsed-fields --ttl 20s blip=int:1

# The fields' expiries are in the transcript (get --fields --json, at once).
ctl --json get mixed --fields
ctl --json get caps --fields
ctl --json get lapsed-fields --fields
sleep 22
# After the pause: a fixed window keeps its expiry, a sliding one moves.
fctl incr caps cap:c77 --by=-1 --ttl 26000d             # 2, its expiry kept
fctl incr caps cap:c78 --ttl 26000d --sliding           # 2, its expiry now + 26000 d

for u in plain solo mixed caps seen fmaster fmember1 fmember2 dropped-fields erased-fields \
  lapsed-fields; do
  ctl_may_miss --json get "$u" --fields
  ctl_may_miss --json get "$u" --own --fields
  ctl_may_miss master-of "$u"
done
ctl --json get caps --field-prefix cap:
ctl --json get solo --fields country,visits,absent

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

# Each write below is one entry of the cluster's log, in log partition
# PartitionOf(user) % 4 ("lp"): a linked user's field write is logged under
# its master, in the master's log partition; a link is two link_step
# entries, the master's list then the user's record naming it. Offsets
# count from 0 per log partition, in the order written.
ctl upsert log-only 70@4000000000,a2=7                  # lp 1, offset 0: codec 2, no fields
fctl field-set log-fields country=str:IT visits=int:1 region=str:north  # lp 2, offset 0
fctl incr log-fields visits --by 2                      # lp 2, offset 1
fctl field-del log-fields visits                        # lp 2, offset 2
ctl upsert log-seg 300@4000000000                       # lp 3, offset 0
fctl incr log-seg cap:c77 --ttl 26000d --cap 5          # lp 3, offset 1
fctl field-set solo visits=int:10                       # lp 3, offset 2: phase a's profile of fields alone
fctl incr fmember1 cap:group --ttl 26000d --cap 10      # fmaster's: lp 0, offset 0
ctl upsert master-cf 400@never                          # lp 2, offset 3
ctl upsert member-cf1 401@never                         # lp 0, offset 1
ctl link member-cf1 master-cf                           # list: lp 2, offset 4; name: lp 0, offset 2
fctl incr member-cf1 cap:c90 --cap 2                    # master-cf's: lp 2, offset 5
fctl field-max member-cf1 last_seen=time:4000000300     # master-cf's: lp 2, offset 6
ctl upsert erased-cf 402@never                          # lp 0, offset 3
fctl field-set erased-cf note=str:x                     # lp 0, offset 4
ctl delete erased-cf                                    # lp 0, offset 5
ctl upsert log-fade 500@never                           # lp 1, offset 1
fctl field-set log-fade --ttl 20s flash=str:gone-soon   # lp 1, offset 2
ctl --json get log-fade --fields
sleep 22

for u in log-only log-fields log-seg solo fmaster fmember1 master-cf member-cf1 erased-cf log-fade; do
  ctl_may_miss --json get "$u" --fields
  ctl_may_miss --json get "$u" --own --fields
  ctl_may_miss master-of "$u"
done
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
