#!/usr/bin/env bash
# A cluster writing through the cluster's log beside a single server, on
# this machine, in one invocation: the cost of the log (and of replicas) on
# the request path. The cluster is one node by default, or --nodes N with
# --replication R; segbench routes by the map and counts every node's CPU.
# Starts, on loopback: etcd (Debian's /usr/bin/etcd), librdkafka's mock Kafka
# cluster (the tests' segstore-test-kafka: 3 brokers, 64 log partitions; not
# a real Kafka: it holds every empty fetch for the consumer's whole
# fetch.wait.max.ms, which a real broker does not), a one-node cluster with a
# [cluster_log] (or N of them) and a single server, each on its own data
# file; then runs
# segbench's workloads on each in alternating rounds, and each node's idle
# CPU over 10 s first.
#
#   bench/cluster/log_vs_single.sh                         # build/, 20,000 users, 2 rounds
#   bench/cluster/log_vs_single.sh --build build-x --users 50000 --rounds 3 -- upsert get
#   bench/cluster/log_vs_single.sh --nodes 3 --replication 2             # three nodes, R = 2
#
# Options: --build DIR (default build; segstored, segbench and
# segstore-test-kafka must be built there), --users N, --seconds S,
# --connections C, --rounds R, --nodes N (default 1), --replication R
# (default 1; at most N), --data DIR (default /var/tmp/segbench-cluster;
# data files, logs and results.txt). Anything after `--` replaces the
# workloads (default: load upsert get). Everything started is stopped on
# exit, by its PID.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
users=20000
seconds=10
connections=16
rounds=2
nodes=1
replication=1
data=/var/tmp/segbench-cluster
workloads=(load upsert get)
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --users) users=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --replication) replication=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --) shift; workloads=("$@"); break ;;
    *) echo "log_vs_single.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
segstored="$build/src/server/segstored"
segbench="$build/bench/segbench/segbench"
kafka="$build/tests/support/segstore-test-kafka"
for b in "$segstored" "$segbench" "$kafka" /usr/bin/etcd; do
  [ -x "$b" ] || { echo "log_vs_single.sh: $b is missing (build it, or install etcd-server)" >&2; exit 2; }
done
script=log_vs_single.sh
# shellcheck source=bench/cluster/common.sh
source "$root/bench/cluster/common.sh"

cat > single.toml <<TOML
[server]
listen = "127.0.0.1:0"
[admin]
listen = "off"
[storage]
path = "$data/single.dat"
file_size = "2GiB"
TOML
for n in $(seq "$nodes"); do start_node "$n" "$nodes" "$replication"; done
"$segstored" --config single.toml > single.log 2>&1 &
single_pid=$!
pids+=($single_pid)
for n in $(seq "$nodes"); do wait_caught_up "$n"; done
for _ in $(seq 600); do [ -n "$(port_of single.log)" ] && break; sleep 0.1; done
single_port=$(port_of single.log)
cluster_port=$(port_of node1.log)
[ -n "$single_port" ] && [ -n "$cluster_port" ] || {
  echo "log_vs_single.sh: a segstored did not start (see $data/*.log)" >&2; exit 1; }

{
  cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
  sleep 2
  a=$(cpu $single_pid); b=$(cpu "${node_pid[1]}")
  sleep 10
  echo "idle 10 s, CPU (s): single $(( ($(cpu $single_pid) - a) )) / 100, a cluster node $(( ($(cpu "${node_pid[1]}") - b) )) / 100"
  "$segbench" --segstore "127.0.0.1:$single_port" limits
  for round in $(seq "$rounds"); do
    for port in "$single_port" "$cluster_port"; do
      echo "=== round $round: $([ "$port" = "$single_port" ] && echo single server || echo "cluster with a log: $nodes nodes, replication $replication")"
      "$segbench" --segstore "127.0.0.1:$port" --users "$users" --connections "$connections" \
        --seconds "$seconds" --warmup 2 "${workloads[@]}"
    done
  done
} 2>&1 | tee results.txt
