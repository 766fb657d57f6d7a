# Sourced by the bench/cluster scripts: a fresh data directory, etcd and the
# mock Kafka on loopback, and their stopping on exit (by PID). Expects
# `data` (a directory it empties and enters), `kafka` (segstore-test-kafka),
# `segstored` and `script` (the caller's name, for messages); sets `pids`,
# `etcd_client` (etcd's client port) and `brokers` (the mock's bootstrap
# servers, 3 brokers, topic segstore of 64 log partitions). Defines
# start_node, port_of and wait_caught_up (below).
rm -rf "$data"
mkdir -p "$data"
cd "$data"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # Only these: a bare `wait` also waits for a caller's `exec > >(tee ...)`,
  # which ends only once this shell has.
  wait "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
etcd_client=$(free_port)
etcd_peer=$(free_port)
/usr/bin/etcd --name bench --data-dir "$data/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_client" \
  --advertise-client-urls "http://127.0.0.1:$etcd_client" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "bench=http://127.0.0.1:$etcd_peer" > etcd.log 2>&1 &
pids+=($!)
mkfifo kafka.in
"$kafka" --brokers 3 --topic segstore --partitions 64 < kafka.in > kafka.out 2> kafka.log &
pids+=($!)
exec 9> kafka.in  # the mock ends when this closes
for _ in $(seq 300); do grep -q '^bootstrap ' kafka.out 2>/dev/null && break; sleep 0.1; done
brokers=$(sed -n 's/^bootstrap //p' kafka.out)
[ -n "$brokers" ] || { echo "$script: the mock Kafka did not start" >&2; exit 1; }

# start_node N INITIAL_NODES REPLICATION: node-N (rack-N) of the cluster,
# writing through the mock's log; config nodeN.toml, data nodeN.dat, output
# nodeN.log; its PID in node_pid[N] (and pids).
declare -A node_pid
start_node() {
  cat > "node$1.toml" <<TOML
[server]
listen = "127.0.0.1:0"
[admin]
listen = "off"
[storage]
path = "$data/node$1.dat"
file_size = "2GiB"
[cluster]
etcd_endpoints = ["http://127.0.0.1:$etcd_client"]
etcd_prefix = "/segbench"
node_id = "node-$1"
rack = "rack-$1"
initial_nodes = $2
replication = $3
[cluster_log]
brokers = "$brokers"
partitions = 64
TOML
  "$segstored" --config "node$1.toml" > "node$1.log" 2>&1 &
  pids+=($!)
  node_pid[$1]=$!
}
# port_of LOG: the port a segstored's output says it serves on.
port_of() { sed -n 's/.*serving on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$1" | head -1; }
# wait_caught_up N: until node N says it caught up with the log (2 minutes).
wait_caught_up() {
  for _ in $(seq 1200); do grep -q "caught up with the log" "node$1.log" && return 0; sleep 0.1; done
  echo "$script: node $1 did not catch up (see $data/node$1.log)" >&2; exit 1
}
