#!/usr/bin/env bash
# How fast a node joining a cluster copies its share (bootstrap), on this
# machine, in one invocation. Starts, on loopback: etcd (Debian's
# /usr/bin/etcd), librdkafka's mock Kafka (the tests' segstore-test-kafka: 3
# brokers, 64 log partitions), two segstored nodes with replication 2; loads
# the reference workload's users through them (segbench load, routed); then
# starts a third node and times it until the map has no move left. Prints
# the third node's copy figures (records, bytes, seconds spent copying) and
# the wall time from its start to the last move, with segbench `limits`.
#
#   bench/cluster/bootstrap_rate.sh                      # build/, 50,000 users
#   bench/cluster/bootstrap_rate.sh --build build-x --users 20000
#
# Options: --build DIR (segstored, segctl, segbench and segstore-test-kafka
# built there), --users N, --data DIR (default /var/tmp/segbench-bootstrap).
# Everything started is stopped on exit, by its PID.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
users=50000
data=/var/tmp/segbench-bootstrap
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --users) users=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    *) echo "bootstrap_rate.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
segstored="$build/src/server/segstored"
segctl="$build/src/tools/segctl"
segbench="$build/bench/segbench/segbench"
kafka="$build/tests/support/segstore-test-kafka"
for b in "$segstored" "$segctl" "$segbench" "$kafka" /usr/bin/etcd; do
  [ -x "$b" ] || { echo "bootstrap_rate.sh: $b is missing (build it, or install etcd-server)" >&2; exit 2; }
done
script=bootstrap_rate.sh
# shellcheck source=bench/cluster/common.sh
source "$root/bench/cluster/common.sh"

stat_of() {  # stat_of PORT NAME
  "$segctl" --server "127.0.0.1:$1" stats --json | python3 -c "import json,sys; print(json.load(sys.stdin).get('$2', 0))"
}

start_node 1 2 2
start_node 2 2 2
wait_caught_up 1
wait_caught_up 2
port1=$(port_of node1.log)
# Everything below goes to results.txt too; not through a pipe, whose
# subshell would keep the third node's PID from cleanup.
exec > >(tee results.txt) 2>&1
"$segbench" --segstore "127.0.0.1:$port1" limits
echo "=== loading $users users through the cluster (2 nodes, replication 2)"
"$segbench" --segstore "127.0.0.1:$port1" --users "$users" load
started=$(date +%s.%N)
start_node 3 2 2
wait_caught_up 3
port3=$(port_of node3.log)
for _ in $(seq 6000); do
  out=$("$segctl" --server "127.0.0.1:$port1" cluster --json)
  if echo "$out" | grep -q '"moves":0' && echo "$out" | grep -q '"id":"node-3"'; then break; fi
  sleep 0.1
done
ended=$(date +%s.%N)
"$segctl" --server "127.0.0.1:$port1" cluster
records=$(stat_of "$port3" replica.records_copied)
bytes=$(stat_of "$port3" replica.bytes_copied)
partitions=$(stat_of "$port3" replica.partitions_copied)
copy_seconds=$(stat_of "$port3" replica.copy_seconds)
python3 - "$records" "$bytes" "$partitions" "$copy_seconds" "$started" "$ended" <<'PY'
import sys
records, nbytes, partitions = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
copy_s, wall = float(sys.argv[4]), float(sys.argv[6]) - float(sys.argv[5])
print(f"node-3 copied {partitions} partitions: {records} records, {nbytes / 1e6:.1f} MB "
      f"in {copy_s:.1f} s of copying ({records / copy_s:,.0f} records/s, "
      f"{nbytes / 1e6 / copy_s:.1f} MB/s); {wall:.1f} s from its start to the last move")
PY
