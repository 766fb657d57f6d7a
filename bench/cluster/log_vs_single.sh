#!/usr/bin/env bash
# A cluster node writing through the cluster's log beside a single server, on
# this machine, in one invocation: the cost of the log on the request path.
# Starts, on loopback: etcd (Debian's /usr/bin/etcd), librdkafka's mock Kafka
# cluster (the tests' segstore-test-kafka: 3 brokers, 64 log partitions; not
# a real Kafka: it holds every empty fetch for the consumer's whole
# fetch.wait.max.ms, which a real broker does not), a one-node cluster with a
# [cluster_log] and a single server, each on its own data file; then runs
# segbench's workloads on each in alternating rounds, and each node's idle
# CPU over 10 s first.
#
#   bench/cluster/log_vs_single.sh                         # build/, 20,000 users, 2 rounds
#   bench/cluster/log_vs_single.sh --build build-x --users 50000 --rounds 3 -- upsert get
#
# Options: --build DIR (default build; segstored, segbench and
# segstore-test-kafka must be built there), --users N, --seconds S,
# --connections C, --rounds R, --data DIR (default /var/tmp/segbench-cluster;
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
data=/var/tmp/segbench-cluster
workloads=(load upsert get)
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --users) users=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
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
cat > cluster.toml <<TOML
[server]
listen = "127.0.0.1:0"
[admin]
listen = "off"
[storage]
path = "$data/cluster.dat"
file_size = "2GiB"
[cluster]
etcd_endpoints = ["http://127.0.0.1:$etcd_client"]
etcd_prefix = "/segbench"
node_id = "bench-1"
initial_nodes = 1
[cluster_log]
brokers = "$brokers"
partitions = 64
TOML
"$segstored" --config single.toml > single.log 2>&1 &
single_pid=$!
pids+=($single_pid)
"$segstored" --config cluster.toml > cluster.log 2>&1 &
cluster_pid=$!
pids+=($cluster_pid)
port_of() { sed -n 's/.*serving on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$1" | head -1; }
for _ in $(seq 600); do
  [ -n "$(port_of single.log)" ] && grep -q "caught up with the log" cluster.log && break
  sleep 0.1
done
single_port=$(port_of single.log)
cluster_port=$(port_of cluster.log)
[ -n "$single_port" ] && [ -n "$cluster_port" ] || {
  echo "log_vs_single.sh: a segstored did not start (see $data/*.log)" >&2; exit 1; }

{
  cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
  sleep 2
  a=$(cpu $single_pid); b=$(cpu $cluster_pid)
  sleep 10
  echo "idle 10 s, CPU (s): single $(( ($(cpu $single_pid) - a) )) / 100, cluster node $(( ($(cpu $cluster_pid) - b) )) / 100"
  "$segbench" --segstore "127.0.0.1:$single_port" limits
  for round in $(seq "$rounds"); do
    for port in "$single_port" "$cluster_port"; do
      echo "=== round $round: $([ "$port" = "$single_port" ] && echo single server || echo cluster node with a log)"
      "$segbench" --segstore "127.0.0.1:$port" --users "$users" --connections "$connections" \
        --seconds "$seconds" --warmup 2 "${workloads[@]}"
    done
  done
} 2>&1 | tee results.txt
