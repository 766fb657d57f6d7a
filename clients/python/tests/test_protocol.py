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
