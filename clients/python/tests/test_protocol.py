"""The I/O-free parts: frames, the stream reader, argument checks, the
exception for every status code. No server needed."""

from __future__ import annotations

import pytest

import segstore
from segstore import (
    GetOptions,
    InvalidArgument,
    ProtocolError,
    SegmentUpdate as S,
    Status,
)
from segstore import errors
from segstore import protocol as p


def test_header_layout():
    data = p.encode_frame(p.Op.GET, 0x01020304, b"\x80")
    assert data == bytes.fromhex("5347 01 10 00 00 0000 01020304 00000001 80")
    f = p.decode_frame(data)
    fields = (f.op, f.status, f.flags, f.request_id, f.body, f.version)
    assert fields == (0x10, 0, 0, 0x01020304, b"\x80", 1)


def test_reader_takes_any_split_of_the_stream():
    frames = [p.Frame(p.Op.PING, 0, 0, i, b"" if i % 2 else p.pack({"n": i})) for i in range(1, 6)]
    stream = b"".join(f.encode() for f in frames)
    for step in (1, 3, 16, 17, 1000):
        reader = p.FrameReader()
        got = []
        for i in range(0, len(stream), step):
            got += reader.feed(stream[i : i + step])
        assert got == frames and reader.buffered == 0


def test_reader_refuses_a_broken_stream():
    with pytest.raises(ProtocolError):
        p.FrameReader().feed(b"XX" + bytes(14))
    header = p.Frame(p.Op.GET, 0, 0, 1).encode()[:12]
    too_big = header + (p.MAX_RESPONSE_BYTES + 1).to_bytes(4, "big")
    with pytest.raises(ProtocolError):
        p.FrameReader().feed(too_big)
    with pytest.raises(ProtocolError):
        p.decode_frame(p.encode_frame(p.Op.PING, 1) + b"\x00")


def test_stale_flag():
    assert p.Frame(p.Op.GET, 0, p.FLAG_STALE | 0x80, 1).stale
    assert not p.Frame(p.Op.GET, 0, 0x80, 1).stale  # undefined bits are ignored


def test_every_status_code_has_its_exception():
    for status in Status:
        if status is Status.OK:
            continue
        cls = segstore.error_class(status)
        assert cls is not segstore.SegstoreError and cls.status is status
        e = errors.error_from_status(status, "why", op="get", address="h:1")
        assert type(e) is cls and e.message == "why" and e.code == int(status)
        assert str(e) == f"{status.name}: get to h:1: why"
        assert isinstance(e, segstore.SegstoreError)
    assert [s.name for s in Status][:3] == ["OK", "NotFound", "InvalidArgument"]
    unknown = errors.error_from_status(99, "new")
    assert type(unknown) is segstore.SegstoreError and unknown.code == 99
    assert unknown.status_name == "Status99"
    assert isinstance(segstore.InvalidArgument("x"), ValueError)


def test_error_frames():
    body = p.pack({"message": "m", "revision": 7})
    e = p.error_of(p.Frame(p.Op.GET, Status.WrongNode, 0, 3, body), "a:1")
    assert isinstance(e, segstore.WrongNode) and e.revision == 7 and e.address == "a:1"
    e = p.error_of(p.Frame(p.Op.GET, Status.Internal, 0, 3, b"\xc1"))
    assert isinstance(e, segstore.Internal) and "unreadable" in e.message
    with pytest.raises(ProtocolError):
        p.decode_response(p.get_request("u"), p.Frame(p.Op.GET, 0, 0, 3, p.pack({"ids": []})))
    with pytest.raises(ProtocolError):  # an answer under another op
        p.decode_response(p.get_request("u"), p.Frame(p.Op.COUNT, 0, 0, 3, p.pack({"count": 1})))
    with pytest.raises(ProtocolError):  # columns of different lengths
        body = p.pack({"count": 2, "ids": [1, 2], "expires": [0]})
        p.decode_response(p.get_request("u"), p.Frame(p.Op.GET, 0, 0, 3, body))


def test_argument_checks():
    with pytest.raises(InvalidArgument):
        GetOptions(projection="everything")
    with pytest.raises(InvalidArgument):
        GetOptions(limit=-1)
    with pytest.raises(InvalidArgument):
        GetOptions(expiry_to=2**32)
    with pytest.raises(InvalidArgument):
        S(-1, 0)
    with pytest.raises(InvalidArgument):
        S(1, 2**32)
    with pytest.raises(InvalidArgument):
        S(1, 0, attr1=True)  # a bool is not an attribute
    with pytest.raises(InvalidArgument):
        p.upsert_request("u", [(1,)])
    with pytest.raises(InvalidArgument):
        p.upsert_request("u", "not segments")
    with pytest.raises(InvalidArgument):
        p.batch_get_request("one user")
    with pytest.raises(InvalidArgument):
        p.remove_request("u", [1, -2])
    with pytest.raises(TypeError):
        segstore.Client(hello=False).get("u", bogus=1)
    with pytest.raises(InvalidArgument):
        segstore.Client(timeout=0)
    with pytest.raises(InvalidArgument):
        segstore.Client(port=70000)


def test_segment_update_wire_forms():
    assert S(1, 2).to_wire() == [1, 2]
    assert S.expiring_in(1, 60).to_wire() == [1, 60, True]
    assert S.expiring_at(1, 1893456000, attr1=3).to_wire() == [1, 1893456000, False, 3]
    assert S.forever(1, attr2=4).to_wire() == [1, 0, False, None, 4]
    import datetime

    when = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    assert S.expiring_at(1, when).value == 1893456000
    with pytest.raises(InvalidArgument):
        S.expiring_at(1, datetime.datetime(2030, 1, 1))  # no time zone


def test_write_ids():
    w = segstore.new_write_id()
    assert len(w) == 16 and any(w) and w != segstore.new_write_id()
    body = p.unpack_body(p.decode_frame(p.delete_request("u", w).frame(1)))
    assert body == {"user": "u", "write_id": w}


def test_addresses():
    assert segstore.parse_address("h:1") == ("h", 1)
    assert segstore.parse_address("[::1]:7700") == ("::1", 7700)
    assert segstore.parse_address("host") == ("host", 7700)
    assert segstore.format_address("::1", 5) == "[::1]:5"
    for bad in ("::1", "h:x", "h:0", ":5", "[::1"):
        with pytest.raises(InvalidArgument):
            segstore.parse_address(bad)


def _body(req: p.Request) -> dict:
    return p.unpack_body(p.decode_frame(req.frame(1)))


def _answer(req: p.Request, body: dict):
    return p.decode_response(req, p.Frame(req.op, 0, 0, 1, p.pack(body)))


def test_link_requests_in_the_c_clients_key_order():
    w = segstore.new_write_id()
    assert p.Op.LINK == 0x26 and p.Op.UNLINK == 0x27 and p.Op.MASTER_OF == 0x13
    assert p.Op.LINKS == 0x14 and p.Op.CONNECTED == 0x15
    assert p.op_name(0x13) == "master_of" and p.op_name(0x26) == "link"
    assert list(_body(p.link_request("a", b"m\xff", 60, w)).items()) == [
        ("user", "a"),
        ("master", b"m\xff"),
        ("ttl", 60),
        ("write_id", w),
    ]
    assert _body(p.link_request("a", "m")) == {"user": "a", "master": "m"}  # ttl 0: left out
    assert _body(p.unlink_request("a")) == {"user": "a"}
    assert _body(p.master_of_request("a")) == {"user": "a"}
    assert _body(p.links_request("a")) == {"user": "a"}
    assert list(_body(p.links_request("a", "b", 10)).items()) == [
        ("user", "a"),
        ("cursor", "b"),
        ("limit", 10),
    ]
    assert _body(p.connected_request("a", b"b")) == {"a": "a", "b": b"b"}
    # own goes last, after limit, and only when set.
    assert list(_body(p.get_request("a", GetOptions(limit=5, own=True))).items()) == [
        ("user", "a"),
        ("limit", 5),
        ("own", True),
    ]
    assert "own" not in _body(p.get_request("a"))
    assert _body(p.batch_get_request(["a"], GetOptions(own=True))) == {"users": ["a"], "own": True}
    # Reads may be sent again after a lost connection; links and unlinks are writes.
    assert [r.idempotent for r in (p.link_request("a", "m"), p.unlink_request("a"))] == [False] * 2
    assert p.master_of_request("a").idempotent and p.links_request("a").idempotent
    assert p.connected_request("a", "b").idempotent
    with pytest.raises(InvalidArgument):
        p.link_request("a", "m", ttl=2**32)
    with pytest.raises(InvalidArgument):
        p.link_request("a", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        p.unlink_request("a", write_id=bytes(16))


def test_link_answers_decode():
    r = _answer(p.link_request("a", "m"), {"master": b"m", "members": 3, "moved": 1})
    assert r == segstore.LinkResult("m", 3, 1)
    assert _answer(p.unlink_request("a"), {"unlinked": True}) is True
    assert _answer(p.master_of_request("a"), {"master": b"\xffm"}) == b"\xffm"  # not UTF-8
    assert _answer(p.connected_request("a", "b"), {"connected": False}) is False
    page = _answer(
        p.links_request("a"),
        {"master": b"m", "links": [[b"a", 0], [b"b", 1893456000]], "next": b"b"},
    )
    assert page == segstore.LinksPage(
        "m", [segstore.LinkedUser("a", 0), segstore.LinkedUser("b", 1893456000)], "b"
    )
    assert page.more and page.users == ["a", "b"] and page.links[0].never_expires
    last = _answer(p.links_request("a"), {"master": b"m", "links": []})
    assert last.next is None and not last.more
    merged = _answer(p.get_request("a"), {"count": 1, "ids": [7], "master": b"m", "profiles": 2})
    assert merged == segstore.GetResult(1, [7], master="m", profiles=2) and merged.merged
    alone = _answer(p.get_request("a"), {"count": 1, "ids": [7]})
    assert alone.master is None and alone.profiles == 0 and not alone.merged
    for req, body in [
        (p.link_request("a", "m"), {"master": b"m", "members": 3}),
        (p.unlink_request("a"), {"unlinked": 1}),
        (p.master_of_request("a"), {"master": 5}),
        (p.links_request("a"), {"master": b"m", "links": [[b"a"]]}),
        (p.links_request("a"), {"master": b"m", "links": [[b"a", "never"]]}),
        (p.connected_request("a", "b"), {}),
        (p.get_request("a"), {"count": 1, "ids": [7], "master": b"m"}),
    ]:
        with pytest.raises(ProtocolError):
            _answer(req, body)


def test_node_to_node_requests_in_the_c_clients_key_order():
    w = segstore.new_write_id()
    assert p.Op.LINK_STEP == 0x31 and p.Op.READ_RECORDS == 0x32
    assert p.op_name(0x31) == "link_step" and p.op_name(0x32) == "read_records"
    every = p.link_step_request(
        "a",
        segstore.StepKind.NAME,
        master="m",
        member=b"b\xff",
        expect="e",
        expires=1893456000,
        moving=[segstore.LinkedUser("c", 0), ("d", 1896134400)],
        listed=["f", b"g"],
        stale=True,
        members_too=True,
        max_links=64,
        write_id=w,
    )
    assert list(_body(every).items()) == [
        ("user", "a"),
        ("kind", "name"),
        ("master", "m"),
        ("member", b"b\xff"),
        ("expect", "e"),
        ("expires", 1893456000),
        ("moving", [["c", 0], ["d", 1896134400]]),
        ("listed", ["f", b"g"]),
        ("stale", True),
        ("members_too", True),
        ("max_links", 64),
        ("write_id", w),
    ]
    # None, empty, 0 and false are left out; a kind is a StepKind or its name.
    bare = p.link_step_request("a", "delete", master="", member=None, expect=b"", moving=[])
    assert _body(bare) == {"user": "a", "kind": "delete"}
    for kind in segstore.StepKind:
        assert _body(p.link_step_request("a", kind.value))["kind"] == kind.value
    assert _body(p.read_records_request(["a", b"b"])) == {"users": ["a", b"b"]}
    # A step is a write, never sent again; read_records is a read. Both lists
    # of a step count against max_batch, as a batch's users do.
    assert not every.idempotent and p.read_records_request(["a"]).idempotent
    assert every.batch == 2 and bare.batch == 0
    assert p.link_step_request("a", "list", listed=["x"] * 3).batch == 3
    assert p.read_records_request(["a", "b", "c"]).batch == 3


def test_node_to_node_arguments_are_checked_before_sending():
    for kind in ("link", "List", "", None, 1):  # a step kind the client refuses to send
        with pytest.raises(InvalidArgument) as e:
            p.link_step_request("a", kind)  # type: ignore[arg-type]
        assert e.value.message.startswith("kind: ")
    for bad in [
        {"expires": 2**32},
        {"expires": -1},
        {"max_links": True},
        {"master": 5},
        {"moving": "cd"},
        {"moving": [("c",)]},
        {"moving": [("c", 2**32)]},
        {"moving": [(None, 0)]},
        {"listed": "f"},
        {"listed": [7]},
        {"write_id": bytes(16)},
    ]:
        with pytest.raises(InvalidArgument):
            p.link_step_request("a", "list", **bad)
    with pytest.raises(InvalidArgument):
        p.link_step_request(3, "list")  # type: ignore[arg-type]
    for users in ([], "one user", [None]):
        with pytest.raises(InvalidArgument):
            p.read_records_request(users)  # type: ignore[arg-type]


def test_node_to_node_answers_decode():
    step = p.link_step_request("a", "list", member="b", max_links=4)
    r = _answer(step, {"applied": True, "changed": False, "members": 2})
    assert r == segstore.LinkStepResult(True, False, 2) and not r.duplicate
    again = _answer(step, {"applied": False, "changed": False, "members": 2, "duplicate": True})
    assert again.duplicate
    req = p.read_records_request(["a", "b", "c"])
    body = {
        "results": [
            {"status": 0, "body": b"\x02\x01", "reference": b""},
            {"status": 14, "message": "not served here", "revision": 9},
            {"status": 0, "body": b"\x02", "reference": b"m\xff"},
        ]
    }
    first, wrong, third = _answer(req, body)
    assert first == segstore.StoredRecord(b"\x02\x01") and first.reference == b""
    assert isinstance(wrong, segstore.WrongNode) and wrong.revision == 9
    assert wrong.user == "b" and wrong.op == "read_records"
    assert third == segstore.StoredRecord(b"\x02", b"m\xff")  # bytes, as the record holds them
    stale = p.decode_response(req, p.Frame(req.op, 0, p.FLAG_STALE, 1, p.pack(body)))
    assert stale[0].stale and stale[2].stale
    # copy_partition: a linked profile's record names its master in a fifth element.
    page = _answer(
        p.copy_partition_request(1),
        {"next": 5, "cursor": 2**32, "records": [[b"k", b"b", 0, 0], [b"l", b"c", 1, 2, b"k"]]},
    )
    assert page.records == [
        segstore.CopiedRecord(b"k", b"b", 0, 0),
        segstore.CopiedRecord(b"l", b"c", 1, 2, b"k"),
    ]
    assert page.finished and page.records[0].reference == b""


def test_node_to_node_bad_answers_are_protocol_errors():
    step = p.link_step_request("a", "drop", member="b")
    records = p.read_records_request(["a"])
    copy = p.copy_partition_request(1)

    def page(*record):
        return {"next": 5, "cursor": 7, "records": [list(record)]}

    for req, body in [
        (step, {"applied": 1, "changed": False, "members": 0}),
        (step, {"applied": True, "changed": "no", "members": 0}),
        (step, {"applied": True, "changed": False}),
        (step, {"applied": True, "changed": False, "members": True}),
        (step, {"applied": True, "changed": False, "members": "1"}),
        (records, {"results": {}}),
        (records, {"results": []}),  # one result per user asked
        (records, {"results": [[]]}),
        (records, {"results": [{"status": 0, "body": b"x"}]}),
        (records, {"results": [{"status": 0, "body": "x", "reference": b""}]}),
        (records, {"results": [{"status": 0, "body": b"x", "reference": None}]}),
        (records, {"results": [{"status": "1", "message": "m"}]}),
        (copy, page(b"k", b"b", 0)),
        (copy, page(b"k", b"b", 0, 0, b"m", b"n")),
        (copy, page("k", b"b", 0, 0)),
        (copy, page(b"k", b"b", 0, True)),
        (copy, page(b"k", b"b", 0, 0, "m")),
        (copy, page(b"k", b"b", 0, 0, None)),
        (copy, {"next": 5, "cursor": 7, "records": [b"k"]}),
    ]:
        with pytest.raises(ProtocolError):
            _answer(req, body)
