# Sourced by the bench/cluster scripts: a fresh data directory, etcd and the
# mock Kafka on loopback, and their stopping on exit (by PID). Expects
# `data` (a directory it empties and enters), `kafka` (segstore-test-kafka)
# and `script` (the caller's name, for messages); sets `pids`,
# `etcd_client` (etcd's client port) and `brokers` (the mock's bootstrap
# servers, 3 brokers, topic segstore of 64 log partitions).
rm -rf "$data"
mkdir -p "$data"
cd "$data"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
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
