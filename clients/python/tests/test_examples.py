"""proto/examples, both ways: every request example is what the equivalent
client call sends, byte for byte (request ID included), and every response
example decodes to the result (or the exception) it stands for.

The calls go through the real Client, against a fake server that checks the
bytes it receives and answers with the example's response; the request ID is
set to the example's before each call.
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Dict, Tuple

import msgpack
import pytest

import segstore
from segstore import (
    ClusterMap,
    CopiedRecord,
    CopyPartitionResult,
    CountResult,
    DeleteResult,
    ExpireOutcome,
    ExpireResult,
    Field,
    FieldMaxResult,
    FieldUpdate,
    FieldWriteResult,
    GetOptions,
    GetResult,
    InDoubt,
    IncrementResult,
    InvalidArgument,
    LimitExceeded,
    LinkedUser,
    LinkResult,
    LinksPage,
    LinkStepResult,
    LogUnavailable,
    Mode,
    NotFound,
    Op,
    ReadOnly,
    RemoveResult,
    Segment,
    SegmentUpdate as S,
    ServerInfo,
    StoredRecord,
    Time,
    TrimResult,
    UpsertItem,
    Unsupported,
    UpsertResult,
    WrongNode,
)
from segstore import protocol as p

from conftest import examples_dir, read_example

WRITE_ID = bytes.fromhex("0123456789abcdef000000000000002a")

# name -> (the client call, what it returns or the exception it raises: (class, message))
CALLS: Dict[str, Tuple[Callable[[segstore.Client], Any], Any]] = {
    "hello": (
        lambda c: c.hello(),
        ServerInfo(1, "segstored 0.1.0", 4194304, 1000, 256, 10000, 256, 256, 1024),
    ),
    "ping": (lambda c: c.ping(), None),
    "ping_bad_body": (
        lambda c: c.call(Op.PING, b"\xc1"),
        (InvalidArgument, "ping: body is not valid MessagePack: byte 0xc1 at offset 0"),
    ),
    "stats": (
        lambda c: c.stats(),
        {
            "server.version": "segstored 0.1.0",
            "server.uptime_seconds": 86400.5,
            "server.requests.get": 12345,
            "storage.write_blocks_free": 3900,
        },
    ),
    "cluster_map": (lambda c: c.cluster_map(), ClusterMap(cluster=False)),
    "get": (lambda c: c.get("user-42", projection="ids"), GetResult(3, [101, 205, 70000])),
    "get_full": (
        lambda c: c.get(
            "user-42", GetOptions(expiry_from=1893456000, id_from=100, id_to=100000, limit=50)
        ),
        GetResult(
            3, [101, 205, 70000], [0, 1896134400, 1896138000], [7, None, None], [None, 3, None]
        ),
    ),
    "get_stale": (
        lambda c: c.get("user-42", projection="ids"),
        GetResult(1, [5484], stale=True),
    ),
    "batch_get": (
        lambda c: c.batch_get(["user-42", "user-43", "nobody"], projection="ids"),
        [
            GetResult(3, [101, 205, 70000]),
            GetResult(1, [7]),
            (NotFound, "no profile for user nobody"),
        ],
    ),
    "batch_get_bad_user": (
        lambda c: c.batch_get(["user-42", "", "nobody"], projection="ids"),
        [
            GetResult(3, [101, 205, 70000]),
            (InvalidArgument, "users[1]: empty user ID"),
            (NotFound, "no live segments"),
        ],
    ),
    "count": (lambda c: c.count("user-42", id_from=200), CountResult(2)),
    "count_missing": (lambda c: c.count("nobody"), (NotFound, "the user has no profile")),
    "upsert": (
        lambda c: c.upsert(
            "user-42",
            [
                S.expiring_in(101, 86400),
                S.expiring_at(205, 1893456000),
                S.expiring_in(70000, 2592000, attr1=7, attr2=3),
                S.forever(9000000000, attr2=12),
            ],
        ),
        UpsertResult(3, 1, 1, 5),
    ),
    "upsert_add": (
        lambda c: c.upsert("user-42", [(101, 3600), (300, 600)], Mode.ADD),
        UpsertResult(1, 1, 0, 6),
    ),
    "upsert_write_id": (
        lambda c: c.upsert("user-42", [S(300, 600)], "add", write_id=WRITE_ID),
        UpsertResult(0, 1, 0, 6, duplicate=True),
    ),
    "upsert_replace_attrs": (
        lambda c: c.upsert(
            "user-42",
            [S.expiring_in(70000, 2592000, attr2=5), S.expiring_in(101, 86400)],
            replace_attrs=True,
        ),
        UpsertResult(0, 2, 0, 6),
    ),
    "expire": (
        lambda c: c.expire("user-42", [101, 205, 9000000000], 3600, ttl=True, condition="gt"),
        ExpireResult([ExpireOutcome.SET, ExpireOutcome.UNCHANGED, ExpireOutcome.MISSING], 5),
    ),
    "batch_upsert": (
        lambda c: c.batch_upsert(
            [
                UpsertItem("user-42", [S.expiring_in(101, 86400)], Mode.EXTEND),
                UpsertItem(
                    "user-43", [S.expiring_at(205, 1893456000), S(206, 1893456000, attr1=1)]
                ),
            ]
        ),
        [
            UpsertResult(0, 1, 0, 5),
            (LimitExceeded, "profile of user-43 would hold 10001 segments, the limit is 10000"),
        ],
    ),
    "batch_upsert_partial": (
        lambda c: c.batch_upsert(
            [
                UpsertItem("user-44", [S.expiring_in(101, 86400)]),
                UpsertItem("user-45", [S.expiring_at(5, 1000000000)]),
                UpsertItem("user-46", [S.expiring_in(7, 3600), S.expiring_in(7, 7200)]),
            ]
        ),
        [
            UpsertResult(1, 0, 0, 1),
            (
                InvalidArgument,
                "segment 5: expiry 1000000000 is not in the future (now is 1795000000)",
            ),
            (InvalidArgument, "segment 7 appears twice in one upsert"),
        ],
    ),
    "remove": (lambda c: c.remove("user-42", [101, 9000000000]), RemoveResult(2)),
    "trim": (lambda c: c.trim("user-42", before=1893456000), TrimResult(1, 4)),
    "delete": (lambda c: c.delete("user-42"), DeleteResult(True)),
    # Profile bridging: user IDs come back as str (UTF-8 bin).
    "link": (
        lambda c: c.link("cookie-77", "user-42", ttl=30 * 86400),
        LinkResult("user-42", members=3, moved=0),
    ),
    "unlink": (lambda c: c.unlink("cookie-77"), True),
    "master_of": (lambda c: c.master_of("device-3"), "user-42"),
    "links": (
        lambda c: c.links("cookie-77", limit=2),
        LinksPage(
            "user-42",
            [LinkedUser("cookie-77", 1896134400), LinkedUser("device-3", 0)],
            next="device-3",
        ),
    ),
    "connected": (lambda c: c.are_connected("cookie-77", "device-3"), True),
    "get_linked": (
        lambda c: c.get("cookie-77"),
        GetResult(
            3,
            [101, 205, 5484],
            [0, 1896134400, 1893542400],
            [7, None, None],
            master="user-42",
            profiles=4,
        ),
    ),
    "get_own": (lambda c: c.get("cookie-77", projection="ids", own=True), GetResult(1, [5484])),
    "scan": (
        lambda c: c.scan(3045, 0, max_bytes=65536),
        segstore.ScanPage(
            3000000000,
            [
                segstore.ScannedProfile(
                    "foo",
                    [Segment(5484, 0), Segment(5485, 1896134400, 7)],
                    {"cap:77": Field(2, 1896134400), "country": Field("FR", 0)},
                    None,
                    0,
                    [LinkedUser("{foo}.cookie", 1896134400)],
                ),
                segstore.ScannedProfile(
                    "{foo}.cookie",
                    [Segment(12, 1893456000, None, 3)],
                    {},
                    "foo",
                    1896134400,
                    [],
                ),
            ],
        ),
    ),
    "copy_partition": (
        lambda c: c.copy_partition(3045, 0, max_bytes=1 << 20),
        CopyPartitionResult(
            1234,
            3000000000,
            [
                CopiedRecord(
                    b"foo", bytes.fromhex("02d10902 65060fba ab010103 9d75"), 1896134400, 0
                ),
                CopiedRecord(
                    b"{foo}.device",
                    bytes.fromhex("02a30901 ec2a0003 9bab0100"),
                    1893456000,
                    1893456000,
                ),
            ],
        ),
    ),
    "copy_partition_done": (
        lambda c: c.copy_partition(3045, 3000000000, min_next=1234),
        CopyPartitionResult(1240, segstore.COPY_FINISHED, []),
    ),
    "link_step": (
        lambda c: c.link_step(
            "home-pc",
            "list",
            member="phone",
            expires=1896134400,
            max_links=64,
            write_id=bytes.fromhex("01020304050607080000000000000001"),
        ),
        LinkStepResult(applied=True, changed=False, members=1),
    ),
    # Profile fields: a value's type is its MessagePack form; a time is a Time.
    "get_fields": (
        lambda c: c.get(
            "user-42",
            projection="ids",
            fields=["cap:77", "country", "last_seen", "score", "consent", "gone"],
        ),
        GetResult(
            1,
            [5484],
            fields={
                "cap:77": Field(2, 1893542400),
                "consent": Field(b"\x01\x9f", 0),
                "country": Field("FR", 0),
                "last_seen": Field(Time(1893455940), 1896134400),
                "score": Field(0.75, 0),
            },
        ),
    ),
    "get_field_prefix": (
        lambda c: c.get("cookie-9", projection="ids", field_prefix="cap:"),
        GetResult(
            0, [], fields={"cap:77": Field(3, 1893542400), "cap:80": Field(1, 1893459600)}
        ),
    ),
    "field_set": (
        lambda c: c.field_set(
            "user-42",
            [
                FieldUpdate("country", "FR"),
                FieldUpdate("score", 0.75, 1896134400),
                FieldUpdate("last_seen", Time(1893456000), 2592000, ttl=True),
            ],
        ),
        FieldWriteResult(3, 7),
    ),
    "field_del": (lambda c: c.field_del("user-42", ["score", "nope"]), FieldWriteResult(1, 6)),
    "field_incr": (
        lambda c: c.field_incr("user-42", "cap:77", ttl=86400, cap=3),
        IncrementResult(3, capped=False),
    ),
    "field_incr_capped": (
        lambda c: c.field_incr("user-42", "cap:77", ttl=86400, cap=3),
        IncrementResult(3, capped=True),
    ),
    "field_max": (
        lambda c: c.field_max("user-42", "last_seen", Time(1893463200), 2592000, ttl=True),
        FieldMaxResult(Time(1893463200), replaced=True),
    ),
    "read_records": (
        lambda c: c.read_records(["phone", "tablet"]),
        [
            StoredRecord(bytes.fromhex("02a30901 ec2a0003 9bab0100"), b"home-pc"),
            (NotFound, "the user has no record"),
        ],
    ),
}

# Response examples without a request example of their own: a call that
# could get that answer, and the exception it raises.
ANSWERS: Dict[str, Tuple[Callable[[segstore.Client], Any], Any]] = {
    "error": (
        lambda c: c.call(Op.GET, {"user": "user-42", "limit": "50"}),
        (InvalidArgument, "get: limit: expected an unsigned integer, got a string"),
    ),
    "wrong_node": (
        lambda c: c.get("foo"),
        (
            WrongNode,
            "get: partition 3045 is not held by this node (map revision 42); ask cluster_map",
        ),
    ),
    "in_doubt": (
        lambda c: c.upsert("user-42", [S(300, 600)], "add", write_id=WRITE_ID),
        (
            InDoubt,
            "the write reached the cluster's log (or may have) but this node did not apply it "
            "in time; retry it with the same write_id to learn its outcome",
        ),
    ),
    "log_unavailable": (
        lambda c: c.upsert("user-42", [S(300, 600)], "add", write_id=WRITE_ID),
        (
            LogUnavailable,
            "the cluster's log did not take the write, nothing was written: Broker: Not enough "
            "in-sync replicas",
        ),
    ),
    "read_only": (
        lambda c: c.delete("user-42"),
        (
            ReadOnly,
            "this node belongs to a passive cluster, which applies another cluster's log and "
            "takes no writes: send writes to the active cluster",
        ),
    ),
    "field_cluster": (
        lambda c: c.field_incr("user-42", "cap:77", ttl=86400, cap=3),
        (
            Unsupported,
            "field_incr: node b of the cluster runs a build without fields; fields are written "
            "once every node is upgraded",
        ),
    ),
    "copy_partition_busy": (
        lambda c: c.copy_partition(3045, 3000000000, min_next=1234),
        (
            segstore.Busy,
            "copy_partition: log partition 37 is applied up to 1100, below min_next 1234; retry "
            "shortly",
        ),
    ),
    "copy_partition_no_log": (
        lambda c: c.copy_partition(3045, 0, max_bytes=1 << 20),
        (InvalidArgument, "copy_partition needs a cluster node that writes through a log"),
    ),
}

CONNECTION_ERRORS = {"bad_magic": (InvalidArgument, "bad frame magic: not a segstore frame")}


def example_names(direction: str):
    suffix = f".{direction}.hex"
    return sorted(f.name[: -len(suffix)] for f in examples_dir().glob(f"*{suffix}"))


def test_every_example_is_covered():
    """A new example fails here until the client (and this table) speak it.

    The tables may run ahead of the examples: an entry whose file is not
    there yet is not tested.
    """
    requests, responses = set(example_names("request")), set(example_names("response"))
    assert requests, f"no examples under {examples_dir()}"
    missing = requests - set(CALLS)
    assert not missing, f"request examples this client does not make: {missing}"
    assert responses <= set(CALLS) | set(ANSWERS) | set(CONNECTION_ERRORS), (
        f"response examples this client does not decode: "
        f"{responses - set(CALLS) - set(ANSWERS) - set(CONNECTION_ERRORS)}"
    )
    assert requests <= responses


def check(outcome: Any, expected: Any) -> None:
    """``outcome`` (a value or an exception) is ``expected`` (a value or (class, message))."""
    if isinstance(expected, list):
        assert isinstance(outcome, list) and len(outcome) == len(expected)
        for o, e in zip(outcome, expected):
            check(o, e)
    elif isinstance(expected, tuple):
        cls, message = expected
        assert type(outcome) is cls, outcome
        assert outcome.message == message
        assert outcome.status == cls.status
    else:
        assert outcome == expected


def outcome_of(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except segstore.SegstoreError as e:
        return e


@pytest.mark.parametrize("name", sorted(set(CALLS) & set(example_names("request"))))
def test_request_example_is_what_the_call_sends(name, fake_server):
    """The client's bytes equal the request example; its result is the response's."""
    request = read_example(f"{name}.request")
    response = read_example(f"{name}.response")

    def serve(conn: socket.socket, index: int) -> None:
        frame = server.read_frame(conn)
        if frame == request:
            conn.sendall(response)

    server = fake_server(serve)
    call, expected = CALLS[name]
    with segstore.Client("127.0.0.1", server.port, hello=False, timeout=10) as c:
        c._last_id = int.from_bytes(request[8:12], "big") - 1
        outcome = outcome_of(lambda: call(c))
    assert server.frames and server.frames[0].hex(" ") == request.hex(" ")
    check(outcome, expected)


@pytest.mark.parametrize(
    "name", sorted((set(CALLS) | set(ANSWERS)) & set(example_names("response")))
)
def test_response_example_decodes(name):
    """Decoding alone, from the frame: the header's fields and the result."""
    data = read_example(f"{name}.response")
    frame = p.decode_frame(data)
    call, expected = CALLS.get(name) or ANSWERS[name]
    assert frame.request_id == int.from_bytes(data[8:12], "big")
    assert frame.stale == (name == "get_stale")
    # The request the call would make, built the way the client builds it.
    recorded = {}

    class Recorder(segstore.Client):
        def _execute(self, req):
            recorded["req"] = req
            return p.decode_response(req, frame, "example")

    outcome = outcome_of(lambda: call(Recorder(hello=False)))
    assert recorded["req"].op == frame.op
    check(outcome, expected)
    if isinstance(outcome, segstore.SegstoreError):
        assert outcome.op == segstore.protocol.op_name(frame.op)
        assert str(outcome).startswith(f"{outcome.status.name}: ")


@pytest.mark.parametrize("name", sorted(example_names("response")))
def test_response_body_packs_back_to_the_same_bytes(name):
    """What the decoder read is the whole value: packing it again gives the bytes."""
    frame = p.decode_frame(read_example(f"{name}.response"))
    if frame.body:
        assert p.pack(p.unpack_body(frame)) == frame.body
    assert frame.encode() == read_example(f"{name}.response")


def test_wrong_node_carries_the_revision():
    frame = p.decode_frame(read_example("wrong_node.response"))
    err = p.error_of(frame)
    assert isinstance(err, WrongNode) and err.revision == 42 and err.status.name == "WrongNode"


def test_bad_magic_answer_is_an_error_of_the_connection(fake_server):
    """Op 0, request ID 0: no request's answer. Said at connect, it is raised."""
    data = read_example("bad_magic.response")
    frame = p.decode_frame(data)
    assert (frame.op, frame.request_id) == (0, 0)
    cls, message = CONNECTION_ERRORS["bad_magic"]
    check(p.error_of(frame), (cls, message))

    def serve(conn: socket.socket, index: int) -> None:
        server.read_frame(conn)
        conn.sendall(data)

    server = fake_server(serve)
    with pytest.raises(InvalidArgument) as e:
        segstore.Client("127.0.0.1", server.port, timeout=10).connect()
    assert e.value.message == message


def test_examples_read_as_their_readme_says():
    """proto/examples/README.md's own reader agrees with the decoder."""
    for name in example_names("response"):
        data = read_example(f"{name}.response")
        frame = p.decode_frame(data)
        body = msgpack.unpackb(data[16:], raw=False) if len(data) > 16 else {}
        assert p.unpack_body(frame) == body
