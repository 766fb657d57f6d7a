#!/usr/bin/python3
"""segstore's RESP port driven by Debian's python3-redis (4.3, RESP2 only).

Run by resp_test.cc against a server it started: resp_redis_py.py PORT.
Exits non-zero, saying what differed, when anything does.
"""
import sys

import redis


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def main():
    port = int(sys.argv[1])
    r = redis.Redis(host="127.0.0.1", port=port, decode_responses=True,
                    socket_timeout=10)
    check("ping", r.ping(), True)
    check("echo", r.echo("bidder"), "bidder")

    up = r.execute_command("SEG.UPSERT", "py1", "TTL", 100, 3600, 200, 7200,
                           "ATTR1", 5)
    check("upsert", up[:4], ["inserted", 2, "updated", 0])
    got = r.execute_command("SEG.GET", "py1", "IDSONLY")
    check("get ids", got, ["count", 2, "stale", 0, "ids", ["100", "200"]])
    got = r.execute_command("SEG.GET", "py1", "IDS", 100, 200)
    check("get columns", got[4::2], ["ids", "expires", "attr1"])
    check("get attr1", got[9], [None, 5])
    check("missing", r.execute_command("SEG.GET", "nobody"), None)
    check("count", r.execute_command("SEG.COUNT", "py1"), 2)

    # A pipeline: replies in order, an error in the middle raised in place.
    p = r.pipeline(transaction=False)
    p.execute_command("SEG.COUNT", "py1")
    p.execute_command("SEG.GET", "py1", "LIMIT", "x")
    p.echo("after")
    out = p.execute(raise_on_error=False)
    check("pipeline count", out[0], 2)
    check("pipeline error type", type(out[1]), redis.exceptions.ResponseError)
    if "LIMIT must be a whole number" not in str(out[1]):
        sys.exit(f"pipeline error message: {out[1]}")
    check("pipeline echo", out[2], "after")

    check("exists", r.exists("py1", "nobody"), 1)
    check("type", r.type("py1"), "hash")
    check("setname", r.client_setname("py-test"), True)
    check("getname", r.client_getname(), "py-test")
    info = r.info()
    check("info version", info["redis_version"], "7.4.0")
    check("info keys", info["db0"]["keys"], 1)
    check("dbsize", r.dbsize(), 1)

    try:
        r.execute_command("HINCRBY", "py1", "5", 1)
        sys.exit("HINCRBY did not fail")
    except redis.exceptions.ResponseError as e:
        if "unknown command 'HINCRBY'" not in str(e):
            sys.exit(f"HINCRBY error: {e}")

    check("delete", r.delete("py1", "nobody"), 1)
    check("gone", r.exists("py1"), 0)

    # A connection the server closed (QUIT) is replaced by the pool.
    r.connection_pool.disconnect()
    check("ping again", r.ping(), True)
    print("ok")


if __name__ == "__main__":
    main()
