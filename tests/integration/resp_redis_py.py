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


def pairs(flat):
    """A RESP2 map (a flat array of keys and values) as a dict."""
    return dict(zip(flat[::2], flat[1::2]))


def fields(r, raw):
    """Profile fields (proto/RESP.md, "Profile fields"); `raw` answers bytes."""
    fs = r.execute_command("SEG.FIELDSET", "py2", "FIELDS", 1, "country", "FR",
                           "TYPE", "double", "FIELDS", 1, "score", 0.25,
                           "TYPE", "time", "EX", 3600, "FIELDS", 1, "seen",
                           1790000000)
    check("fieldset", fs, ["changed", 3, "count", 3, "duplicate", 0])

    # A cap of 2: the third increment is refused, a None and no error.
    incr = ("SEG.INCR", "py2", "cap:7", 1, "TTL", 86400, "CAP", 2)
    check("incr 1", r.execute_command(*incr), 1)
    p = r.pipeline(transaction=False)
    p.execute_command(*incr)
    p.execute_command(*incr)
    p.execute_command("SEG.INCR", "py2", "country", 1)
    out = p.execute(raise_on_error=False)
    check("incr in a pipeline", out[:2], [2, None])
    check("incr of a string", type(out[2]), redis.exceptions.ResponseError)

    got = pairs(r.execute_command("SEG.GET", "py2", "ALLFIELDS"))
    check("get of fields alone", [got["count"], got["ids"]], [0, []])
    check("fields", pairs(got["fields"]), {
        "cap:7": ["int", 2, 1790086400],
        "country": ["string", "FR", 0],
        "score": ["double", "0.25", 0],
        "seen": ["time", 1790000000, 1790003600],
    })
    got = pairs(r.execute_command("SEG.GET", "py2", "FIELDPREFIX", "s"))
    check("prefix", list(pairs(got["fields"])), ["score", "seen"])
    check("no fields asked", "fields" in pairs(r.execute_command("SEG.GET", "py2")),
          False)
    mget = r.execute_command("SEG.MGET", 2, "py2", "nobody", "FIELDS", 1, "score")
    check("mget", [pairs(pairs(mget[0])["fields"]), mget[1]],
          [{"score": ["double", "0.25", 0]}, None])

    fm = pairs(r.execute_command("SEG.FIELDMAX", "py2", "score", 0.5, "TYPE",
                                 "double"))
    check("fieldmax", [float(fm["value"]), fm["replaced"]], [0.5, 1])
    fm = pairs(r.execute_command("SEG.FIELDMAX", "py2", "score", -1, "TYPE",
                                 "double"))
    check("fieldmax kept", [fm["value"], fm["replaced"]], ["0.5", 0])

    check("fielddel", r.execute_command("SEG.FIELDDEL", "py2", "FIELDS", 2,
                                        "seen", "nosuch"),
          ["changed", 1, "count", 3, "duplicate", 0])
    check("fielddel of nobody",
          r.execute_command("SEG.FIELDDEL", "nobody", "FIELDS", 1, "a"), None)

    # Bytes go in and come out as they are.
    blob = bytes(range(256))
    raw.execute_command("SEG.FIELDSET", "py3", "TYPE", "bytes", "FIELDS", 1,
                        "blob", blob)
    got = pairs(raw.execute_command("SEG.GET", "py3", "FIELDS", 1, "blob"))
    check("bytes", pairs(got[b"fields"]), {b"blob": [b"bytes", blob, 0]})
    try:
        raw.execute_command("SEG.FIELDSET", "py3", "FIELDS", 1, "text", blob)
        sys.exit("a string value that is not UTF-8 was taken")
    except redis.exceptions.ResponseError as e:
        if "give TYPE bytes" not in str(e):
            sys.exit(f"not UTF-8: {e}")
    check("delete fields", r.delete("py2", "py3"), 2)


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

    fields(r, redis.Redis(host="127.0.0.1", port=port, socket_timeout=10))

    # A connection the server closed (QUIT) is replaced by the pool.
    r.connection_pool.disconnect()
    check("ping again", r.ping(), True)
    print("ok")


if __name__ == "__main__":
    main()
