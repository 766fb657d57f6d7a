#!/usr/bin/python3
"""A segstore cluster's RESP ports driven by python3-redis's RedisCluster.

Run by resp_cluster_test.cc: resp_redis_cluster.py PORT (any node's RESP
port). The client learns the slots from CLUSTER SLOTS and the commands'
keys from COMMAND, then sends each command to the node holding its key.
Exits non-zero, saying what differed, when anything does.
"""
import sys

from redis.cluster import RedisCluster


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def main():
    rc = RedisCluster(host="127.0.0.1", port=int(sys.argv[1]),
                      decode_responses=True, socket_timeout=10)
    nodes = {n.name for n in rc.get_nodes()}
    check("nodes", len(nodes), 3)
    used = set()
    for i in range(60):
        key = f"py-{i}"
        check("hset", rc.hset(key, str(i), "1:2"), 1)
        used.add(rc.get_node_from_key(key).name)
    check("every node holds keys", used, nodes)
    for i in range(60):
        key = f"py-{i}"
        check("hgetall", rc.hgetall(key), {str(i): "1:2"})
        check("hlen", rc.hlen(key), 1)
        got = rc.execute_command("SEG.GET", key, "IDSONLY")
        check("seg.get", got[5], [str(i)])
    # Multi-key commands are split by slot by the client.
    check("exists", rc.exists("py-1", "py-2", "py-3", "nope"), 3)
    check("delete", rc.delete("py-1", "py-2"), 2)
    check("exists after", rc.exists("py-1", "py-2"), 0)
    print("ok")


if __name__ == "__main__":
    main()
