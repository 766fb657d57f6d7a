#!/usr/bin/env bash
# Failover as clients see it: three nodes on loopback (replication 2, racks
# rack-1..3, the default lease TTL of 10 s and failure grace of 30 s)
# writing through librdkafka's mock Kafka (the tests' segstore-test-kafka),
# on a real etcd. cluster_failover writes users whose partitions node-3
# serves first, reads and writes them from its threads, SIGKILLs node-3, and
# reports from the kill: the first successful read and write, what failed,
# the longest time without a success, and latency before and after. Then
# the cluster is shown once node-3's partitions have replicas again.
#
#   bench/cluster/failover.sh                      # build/, 2,000 users, 45 s after the kill
#   bench/cluster/failover.sh --build build-x --after 60 --readers 4 --writers 4
#
# Options: --build DIR, --users N, --readers N, --writers N, --after S,
# --data DIR (default /var/tmp/segbench-failover; logs and results.txt).
# Everything started is stopped on exit, by its PID.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
users=2000
readers=2
writers=2
after=45
data=/var/tmp/segbench-failover
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --users) users=$2; shift 2 ;;
    --readers) readers=$2; shift 2 ;;
    --writers) writers=$2; shift 2 ;;
    --after) after=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    *) echo "failover.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
segstored="$build/src/server/segstored"
segctl="$build/src/tools/segctl"
segbench="$build/bench/segbench/segbench"
failover="$build/bench/cluster_failover"
kafka="$build/tests/support/segstore-test-kafka"
for b in "$segstored" "$segctl" "$segbench" "$failover" "$kafka" /usr/bin/etcd; do
  [ -x "$b" ] || { echo "failover.sh: $b is missing (build it, or install etcd-server)" >&2; exit 2; }
done
script=failover.sh
# shellcheck source=bench/cluster/common.sh
source "$root/bench/cluster/common.sh"

for n in 1 2 3; do start_node $n 3 2; done
for n in 1 2 3; do wait_caught_up $n; done
port1=$(port_of node1.log)
port3=$(port_of node3.log)
exec > >(tee results.txt) 2>&1
"$segbench" --segstore "127.0.0.1:$port1" limits
"$segctl" --server "127.0.0.1:$port1" cluster
echo "=== SIGKILL of node-3 (pid ${node_pid[3]}) under $readers readers and $writers writers of its partitions"
"$failover" --seed "127.0.0.1:$port1" --victim "127.0.0.1:$port3" --kill-pid "${node_pid[3]}" \
  --users "$users" --readers "$readers" --writers "$writers" --after "$after" \
  --json-file failover.json
for _ in $(seq 600); do
  out=$("$segctl" --server "127.0.0.1:$port1" cluster --json)
  if ! echo "$out" | grep -q '"id":"node-3"' && echo "$out" | grep -q '"moves":0'; then break; fi
  sleep 0.5
done
echo "=== after the failure grace: node-3's partitions on the others"
"$segctl" --server "127.0.0.1:$port1" cluster
