"""The segstore wire protocol, version 1 (proto/PROTOCOL.md), without I/O.

Frames, request bodies and response bodies: both clients (``segstore.Client``
and ``segstore.aio.AsyncClient``) build every request here and decode every
answer here, so this module is the whole of the protocol on the Python side
and can be tested without a socket.

A frame is a 16-byte big-endian header (magic ``SG``, version, op, status,
flags, reserved, request_id, body_length) and a MessagePack body.
:class:`Request` is one request ready to be framed: its op, its encoded body,
whether it may be sent again after a lost connection (a read) and how its
answer is decoded. :class:`FrameReader` cuts a byte stream into frames.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import msgpack

from .errors import (
    InvalidArgument,
    ProtocolError,
    SegstoreError,
    Status,
    error_from_status,
)
from .models import (
    MAX_U32,
    MAX_U64,
    ClusterMap,
    Condition,
    CopiedRecord,
    CopyPartitionResult,
    CountResult,
    DeleteResult,
    ExpireOutcome,
    ExpireResult,
    Field,
    FieldMaxResult,
    FieldName,
    FieldUpdate,
    FieldValue,
    FieldWriteResult,
    GetOptions,
    GetResult,
    IncrementResult,
    LinkedUser,
    LinkResult,
    LinksPage,
    LinkStepResult,
    Mode,
    Node,
    Projection,
    RemoveResult,
    ScannedProfile,
    ScanPage,
    Segment,
    SegmentLike,
    ServerInfo,
    StepKind,
    StoredRecord,
    TrimResult,
    UpsertItem,
    UpsertResult,
    UserId,
    _check_uint,
    as_segment,
    Time,
    check_field_name,
    check_field_value,
    check_write_id,
)

VERSION = 1
HEADER_SIZE = 16
MAGIC = b"SG"
FLAG_STALE = 0x01
"""Response flag: a cluster node answered a read from a copy that may be behind."""

DEFAULT_MAX_FRAME_BYTES = 4 << 20
DEFAULT_MAX_BATCH = 1000
DEFAULT_MAX_KEY_BYTES = 256
DEFAULT_MAX_IN_FLIGHT = 256
MAX_RESPONSE_BYTES = 64 << 20
"""No response body is larger; a header announcing more is a broken stream."""


class Op(enum.IntEnum):
    """Operation codes (PROTOCOL.md, "Operations")."""

    HELLO = 0x01
    PING = 0x02
    STATS = 0x03
    CLUSTER_MAP = 0x04
    GET = 0x10
    BATCH_GET = 0x11
    COUNT = 0x12
    MASTER_OF = 0x13
    LINKS = 0x14
    CONNECTED = 0x15
    SCAN = 0x16
    UPSERT = 0x20
    BATCH_UPSERT = 0x21
    REMOVE = 0x22
    TRIM = 0x23
    DELETE = 0x24
    EXPIRE = 0x25
    LINK = 0x26
    UNLINK = 0x27
    FIELD_SET = 0x28
    FIELD_DEL = 0x29
    FIELD_INCR = 0x2A
    FIELD_MAX = 0x2B
    COPY_PARTITION = 0x30
    LINK_STEP = 0x31
    READ_RECORDS = 0x32

    @property
    def wire_name(self) -> str:
        """The protocol's name: ``"batch_get"``, ``"cluster_map"``..."""
        return self.name.lower()


def op_name(op: int) -> str:
    """``"get"`` for 0x10; ``"op 0x7f"`` for a code this client does not know."""
    try:
        return Op(op).wire_name
    except ValueError:
        return f"op 0x{op:02x}"


# ---- frames ----

_HEADER = struct.Struct(">2sBBBBHII")


@dataclass(frozen=True)
class Frame:
    """One frame: its header fields and its body bytes (not yet decoded)."""

    op: int
    status: int
    flags: int
    request_id: int
    body: bytes = b""
    version: int = VERSION

    @property
    def stale(self) -> bool:
        return bool(self.flags & FLAG_STALE)

    def encode(self) -> bytes:
        return (
            _HEADER.pack(
                MAGIC,
                self.version,
                self.op,
                self.status,
                self.flags,
                0,
                self.request_id,
                len(self.body),
            )
            + self.body
        )


def encode_frame(op: int, request_id: int, body: bytes = b"") -> bytes:
    """A request frame: header (status, flags and reserved 0) and body."""
    return _HEADER.pack(MAGIC, VERSION, op, 0, 0, 0, request_id, len(body)) + body


class FrameReader:
    """Cuts a byte stream into frames; I/O-free, used by both clients.

    ``feed`` takes whatever bytes arrived and returns the frames they
    completed. A bad magic or a body over ``max_body`` raises ProtocolError:
    the stream cannot be trusted after either, so close the connection.
    """

    def __init__(self, max_body: int = MAX_RESPONSE_BYTES) -> None:
        self._buf = bytearray()
        self._max_body = max_body

    @property
    def buffered(self) -> int:
        """Bytes received that do not make a whole frame yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> List[Frame]:
        buf = self._buf
        buf += data
        frames: List[Frame] = []
        pos = 0
        end = len(buf)
        while end - pos >= HEADER_SIZE:
            magic, version, op, status, flags, _, request_id, length = _HEADER.unpack_from(
                buf, pos
            )
            if magic != MAGIC:
                raise ProtocolError(f"bad frame magic {bytes(magic)!r}: not a segstore stream")
            if length > self._max_body:
                raise ProtocolError(
                    f"a frame announces a body of {length} bytes, over {self._max_body}"
                )
            if end - pos - HEADER_SIZE < length:
                break
            start = pos + HEADER_SIZE
            frames.append(
                Frame(op, status, flags, request_id, bytes(buf[start : start + length]), version)
            )
            pos = start + length
        if pos:
            del buf[:pos]
        return frames


def decode_frame(data: bytes) -> Frame:
    """Exactly one whole frame from ``data``; ProtocolError otherwise."""
    frames = FrameReader().feed(data)
    if len(frames) != 1 or len(frames[0].body) + HEADER_SIZE != len(data):
        raise ProtocolError(f"{len(data)} bytes are not exactly one frame")
    return frames[0]


# ---- bodies ----


def pack(value: Any) -> bytes:
    """MessagePack of ``value``: str as str, bytes as bin, shortest integers."""
    return msgpack.packb(value, use_bin_type=True)


def unpack_body(frame: Frame) -> Any:
    """The frame's body as a Python value (``{}`` for an empty body)."""
    if not frame.body:
        return {}
    try:
        return msgpack.unpackb(frame.body, raw=False, use_list=True)
    except Exception as e:  # msgpack raises several types; all mean a bad body
        raise ProtocolError(
            f"{op_name(frame.op)} answer: the body is not valid MessagePack: {e}"
        ) from None


def _field(body: Mapping[str, Any], key: str, types: Any, what: str, op: str) -> Any:
    try:
        v = body[key]
    except KeyError:
        raise ProtocolError(f"{op} answer: no {key!r}") from None
    if not isinstance(v, types) or isinstance(v, bool) and types is int:
        raise ProtocolError(f"{op} answer: {key!r} is not {what}: {v!r}")
    return v


def _optional_int(body: Mapping[str, Any], key: str, op: str) -> int:
    """An integer the answer may lack (0 then, as for a nil)."""
    v = body.get(key)
    if v is None:
        return 0
    if not isinstance(v, int) or isinstance(v, bool):
        raise ProtocolError(f"{op} answer: {key!r} is not an integer: {v!r}")
    return v


def _map(value: Any, op: str, where: str = "the body") -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{op} answer: {where} is not a map")
    return value


def error_of(frame: Frame, address: Optional[str] = None) -> SegstoreError:
    """The exception a frame with a non-zero status stands for.

    Its message is the body's ``message`` (a WrongNode's ``revision`` too);
    a body that cannot be read still gives the status, with a note.
    """
    name = op_name(frame.op) if frame.op else None
    message = ""
    revision = None
    try:
        body = unpack_body(frame)
        if isinstance(body, dict):
            message = body.get("message", "")
            rev = body.get("revision")
            if isinstance(rev, int) and not isinstance(rev, bool):
                revision = rev
        if not isinstance(message, str):
            message = repr(message)
    except ProtocolError as e:
        message = f"(unreadable error body: {e.message})"
    return error_from_status(frame.status, message, op=name, address=address, revision=revision)


# ---- requests ----

Parse = Callable[[Any, Frame], Any]


@dataclass(frozen=True)
class Request:
    """One request, ready to frame.

    Attributes:
        op: the operation code.
        body: the encoded body (``b""`` for none).
        idempotent: safe to send again when the connection broke before the
            answer (reads); writes are never sent again by the client.
        parse: turns the decoded body of an OK answer (and its frame) into
            the operation's result.
        batch: entries of a batch (users or items; the longer list of a
            link_step), for the max_batch check.
    """

    op: int
    body: bytes
    idempotent: bool
    parse: Parse
    batch: int = 0

    @property
    def name(self) -> str:
        return op_name(self.op)

    def frame(self, request_id: int) -> bytes:
        return encode_frame(self.op, request_id, self.body)


def decode_response(request: Request, frame: Frame, address: Optional[str] = None) -> Any:
    """The result of ``request`` from its answer ``frame``, or raises its error."""
    if frame.status != 0:
        raise error_of(frame, address)
    if frame.op != request.op:
        raise ProtocolError(
            f"the answer to {request.name} (request {frame.request_id}) came as "
            f"{op_name(frame.op)}"
        )
    return request.parse(unpack_body(frame), frame)


def _user(user: UserId, name: str = "user") -> UserId:
    if isinstance(user, (str, bytes)):
        return user
    if isinstance(user, bytearray):
        return bytes(user)
    raise InvalidArgument(f"{name}: a user ID is a str or bytes, not {type(user).__name__}")


def _users(users: Iterable[UserId], name: str) -> List[UserId]:
    if isinstance(users, (str, bytes)) or not isinstance(users, Iterable):
        raise InvalidArgument(f"{name}: expected a list of user IDs, not one")
    return [_user(u, f"{name}[{i}]") for i, u in enumerate(users)]


def user_id_of(value: Union[bytes, str]) -> UserId:
    """A user ID as the server answered it (bin): a str when UTF-8, else bytes."""
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return bytes(value)


def _user_field(body: Mapping[str, Any], key: str, op: str) -> UserId:
    return user_id_of(_field(body, key, (bytes, str), "a user ID", op))


def _mode(mode: Union[Mode, str]) -> str:
    try:
        return Mode(mode).value
    except ValueError:
        raise InvalidArgument(f"mode: {mode!r} is not one of 'set', 'extend', 'add'") from None


def _write_id_into(d: Dict[str, Any], write_id: Optional[bytes]) -> Dict[str, Any]:
    wid = check_write_id(write_id)
    if wid is not None:
        d["write_id"] = wid
    return d


def _option_fields(o: GetOptions, d: Dict[str, Any]) -> Dict[str, Any]:
    # The defaults are left out, in the order the C++ client writes the rest.
    if o.projection is Projection.IDS:
        d["projection"] = "ids"
    if o.expiry_from != 0:
        d["expiry_from"] = o.expiry_from
    if o.expiry_to != MAX_U32:
        d["expiry_to"] = o.expiry_to
    if o.outside_expiry:
        d["outside_expiry"] = True
    if o.id_from != 0:
        d["id_from"] = o.id_from
    if o.id_to != MAX_U64:
        d["id_to"] = o.id_to
    if o.count_only:
        d["count_only"] = True
    if o.limit != 0:
        d["limit"] = o.limit
    if o.own:
        d["own"] = True
    if o.fields is True:
        d["fields"] = True
    elif o.fields:
        d["fields"] = list(o.fields)
    elif o.fields is not None and o.fields is not False:  # an empty list: none by name
        d["fields"] = []
    if o.field_prefix is not None:
        d["field_prefix"] = o.field_prefix
    return d


def _segments(segments: Iterable[SegmentLike]) -> List[list]:
    if isinstance(segments, (str, bytes)) or not isinstance(segments, Iterable):
        raise InvalidArgument("segments: expected a list of SegmentUpdate or tuples")
    return [as_segment(s).to_wire() for s in segments]


DEFAULT_GET_OPTIONS = GetOptions()


# hello


def _parse_hello(body: Any, frame: Frame) -> ServerInfo:
    b = _map(body, "hello")
    return ServerInfo(
        protocol=_field(b, "protocol", int, "an integer", "hello"),
        server=_field(b, "server", str, "a string", "hello"),
        max_frame_bytes=_field(b, "max_frame_bytes", int, "an integer", "hello"),
        max_batch=_field(b, "max_batch", int, "an integer", "hello"),
        max_key_bytes=_field(b, "max_key_bytes", int, "an integer", "hello"),
        max_segments=_field(b, "max_segments", int, "an integer", "hello"),
        max_in_flight=_field(b, "max_in_flight", int, "an integer", "hello"),
        # 0 when the server is older than profile fields.
        max_fields=_optional_int(b, "max_fields", "hello"),
        max_field_bytes=_optional_int(b, "max_field_bytes", "hello"),
    )


def hello_request(client: str, auth: Union[str, bytes, None] = None) -> Request:
    """hello: introduce the client (``client``, for the server's log), with the secret."""
    d: Dict[str, Any] = {"client": client}
    if auth:
        d["auth"] = auth
    return Request(Op.HELLO, pack(d), True, _parse_hello)


def ping_request() -> Request:
    return Request(Op.PING, b"", True, lambda body, frame: None)


def _parse_stats(body: Any, frame: Frame) -> Dict[str, Union[int, float, str]]:
    return dict(_map(body, "stats"))


def stats_request() -> Request:
    return Request(Op.STATS, b"", True, _parse_stats)


def _parse_cluster_map(body: Any, frame: Frame) -> ClusterMap:
    op = "cluster_map"
    b = _map(body, op)
    nodes = []
    for n in b.get("nodes") or []:
        n = _map(n, op, "a node")
        nodes.append(
            Node(
                id=_field(n, "id", str, "a string", op),
                address=_field(n, "address", str, "a string", op),
                rack=n.get("rack", "") or "",
                resp=n.get("resp", "") or "",
            )
        )
    return ClusterMap(
        cluster=bool(_field(b, "cluster", bool, "a bool", op)),
        revision=b.get("revision", 0) or 0,
        self_id=b.get("self", "") or "",
        replication=b.get("replication", 0) or 0,
        nodes=nodes,
        partitions=[list(p) for p in b.get("partitions") or []],
        incoming=[(int(p), int(n)) for p, n in b.get("incoming") or []],
        log=bool(b.get("log", False)),
        passive=bool(b.get("passive", False)),
    )


def cluster_map_request() -> Request:
    return Request(Op.CLUSTER_MAP, b"", True, _parse_cluster_map)


# reads


def _get_result(b: Mapping[str, Any], stale: bool, op: str) -> GetResult:
    count = _field(b, "count", int, "an integer", op)
    ids = b.get("ids")
    if ids is None:
        ids = []
    elif not isinstance(ids, list):
        raise ProtocolError(f"{op} answer: 'ids' is not a list")
    columns = []
    for key in ("expires", "attr1", "attr2"):
        col = b.get(key)
        if col is not None and (not isinstance(col, list) or len(col) != len(ids)):
            raise ProtocolError(f"{op} answer: {key!r} is not a list as long as 'ids'")
        columns.append(col)
    # A linked user's merged view names its group's master (absent otherwise).
    master: Optional[UserId] = None
    profiles = 0
    if b.get("master") is not None:
        master = _user_field(b, "master", op)
        profiles = _field(b, "profiles", int, "an integer", op)
    return GetResult(
        count, ids, columns[0], columns[1], columns[2], stale, master, profiles, _fields(b, op)
    )


# profile fields (PROTOCOL.md, "Profile fields")


def _wire_value(value: FieldValue) -> Any:
    """A field value in its MessagePack form (a Time as the timestamp)."""
    if isinstance(value, Time):
        return msgpack.Timestamp(value.seconds, 0)
    return value


def _field_value(v: Any, op: str) -> FieldValue:
    """A field value as the server sent it (a timestamp as a Time)."""
    if isinstance(v, msgpack.Timestamp):
        if v.nanoseconds != 0 or not 0 <= v.seconds <= MAX_U32:
            raise ProtocolError(f"{op} answer: a time that is not whole seconds in 32 bits: {v!r}")
        return Time(v.seconds)
    if isinstance(v, bool) or not isinstance(v, (int, float, str, bytes)):
        raise ProtocolError(f"{op} answer: {v!r} is not a field value")
    return v


def _fields(b: Mapping[str, Any], op: str) -> Optional[Dict[FieldName, Field]]:
    raw = b.get("fields")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProtocolError(f"{op} answer: 'fields' is not a map")
    out: Dict[FieldName, Field] = {}
    for name, entry in raw.items():
        if not isinstance(name, (str, bytes)) or not isinstance(entry, list) or len(entry) != 2:
            raise ProtocolError(f"{op} answer: field {name!r} is not [value, expires_at]")
        expires_at = entry[1]
        if isinstance(expires_at, bool) or not isinstance(expires_at, int):
            raise ProtocolError(f"{op} answer: field {name!r}: expires_at is not an integer")
        out[name] = Field(_field_value(entry[0], op), expires_at)
    return out


def _parse_get(body: Any, frame: Frame) -> GetResult:
    return _get_result(_map(body, "get"), frame.stale, "get")


def get_request(user: UserId, options: GetOptions = DEFAULT_GET_OPTIONS) -> Request:
    """get: one user's live segments matching ``options``."""
    return Request(Op.GET, pack(_option_fields(options, {"user": _user(user)})), True, _parse_get)


def _entry_error(e: Mapping[str, Any], op: str, user: Optional[UserId]) -> SegstoreError:
    message = e.get("message", "")
    return error_from_status(
        _field(e, "status", int, "an integer", op),
        message if isinstance(message, str) else repr(message),
        op=op,
        user=user,
        revision=e.get("revision"),
    )


def _results(body: Any, op: str, users: Sequence[Optional[UserId]], ok: Callable) -> list:
    b = _map(body, op)
    results = _field(b, "results", list, "a list", op)
    if len(results) != len(users):
        raise ProtocolError(f"{op} answer: {len(results)} results for {len(users)} entries")
    out: list = []
    for i, (entry, user) in enumerate(zip(results, users)):
        e = _map(entry, op, f"results[{i}]")
        if e.get("status", 0) != 0:
            out.append(_entry_error(e, op, user))
        else:
            out.append(ok(e))
    return out


def batch_get_request(
    users: Sequence[UserId], options: GetOptions = DEFAULT_GET_OPTIONS
) -> Request:
    """batch_get: ``options`` applied to every user; one result per user, in order.

    Each result is a GetResult, or the SegstoreError of that user alone
    (NotFound for a user without a profile), in its place.
    """
    users = _users(users, "users")

    def parse(body: Any, frame: Frame) -> List[Union[GetResult, SegstoreError]]:
        stale = frame.stale
        return _results(body, "batch_get", users, lambda e: _get_result(e, stale, "batch_get"))

    return Request(
        Op.BATCH_GET, pack(_option_fields(options, {"users": users})), True, parse, len(users)
    )


def _parse_count(body: Any, frame: Frame) -> CountResult:
    count = _field(_map(body, "count"), "count", int, "an integer", "count")
    return CountResult(count, frame.stale)


def count_request(user: UserId, id_from: int = 0, id_to: int = MAX_U64) -> Request:
    """count: live segments of ``user`` with IDs in ``[id_from, id_to]``."""
    _check_uint("id_from", id_from, MAX_U64)
    _check_uint("id_to", id_to, MAX_U64)
    d = {"user": _user(user), "id_from": id_from, "id_to": id_to}
    return Request(Op.COUNT, pack(d), True, _parse_count)


# writes


def _upsert_result(b: Mapping[str, Any], op: str) -> UpsertResult:
    return UpsertResult(
        inserted=_field(b, "inserted", int, "an integer", op),
        updated=_field(b, "updated", int, "an integer", op),
        trimmed=_field(b, "trimmed", int, "an integer", op),
        count=_field(b, "count", int, "an integer", op),
        duplicate=b.get("duplicate") is True,
    )


def _upsert_body(
    user: UserId,
    segments: Iterable[SegmentLike],
    mode: Union[Mode, str],
    write_id: Optional[bytes],
    replace_attrs: bool,
) -> Dict[str, Any]:
    d = {"user": _user(user), "mode": _mode(mode), "segments": _segments(segments)}
    if replace_attrs:
        d["replace_attrs"] = True
    return _write_id_into(d, write_id)


def upsert_request(
    user: UserId,
    segments: Iterable[SegmentLike],
    mode: Union[Mode, str] = Mode.SET,
    write_id: Optional[bytes] = None,
    replace_attrs: bool = False,
) -> Request:
    """upsert: add or update segments of one user.

    With ``replace_attrs`` each named segment's attributes become exactly
    those given (None clears one) instead of None keeping the current value.
    """
    body = pack(_upsert_body(user, segments, mode, write_id, replace_attrs))
    return Request(
        Op.UPSERT, body, False, lambda b, frame: _upsert_result(_map(b, "upsert"), "upsert")
    )


def batch_upsert_request(
    items: Iterable[Union[UpsertItem, Mapping[str, Any]]], mode: Union[Mode, str] = Mode.SET
) -> Request:
    """batch_upsert: one upsert per item, each failing alone.

    Every item's mode is sent with it (its own, else ``mode``).
    """
    default_mode = _mode(mode)
    bodies = []
    users: List[Optional[UserId]] = []
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            item = UpsertItem(**item)
        if not isinstance(item, UpsertItem):
            raise InvalidArgument(f"items[{i}]: expected an UpsertItem")
        bodies.append(
            _upsert_body(
                item.user,
                item.segments,
                item.mode if item.mode is not None else default_mode,
                item.write_id,
                item.replace_attrs,
            )
        )
        users.append(item.user)

    def parse(body: Any, frame: Frame) -> List[Union[UpsertResult, SegstoreError]]:
        return _results(
            body, "batch_upsert", users, lambda e: _upsert_result(e, "batch_upsert")
        )

    return Request(Op.BATCH_UPSERT, pack({"items": bodies}), False, parse, len(bodies))


def remove_request(user: UserId, ids: Iterable[int], write_id: Optional[bytes] = None) -> Request:
    """remove: drop these segment IDs of one user."""
    ids = list(ids)
    for i in ids:
        _check_uint("ids", i, MAX_U64)
    body = pack(_write_id_into({"user": _user(user), "ids": ids}, write_id))

    def parse(b: Any, frame: Frame) -> RemoveResult:
        b = _map(b, "remove")
        return RemoveResult(
            _field(b, "removed", int, "an integer", "remove"), b.get("duplicate") is True
        )

    return Request(Op.REMOVE, body, False, parse)


def trim_request(user: UserId, before: int = 0, write_id: Optional[bytes] = None) -> Request:
    """trim: drop every segment not live at ``before`` (0: now)."""
    _check_uint("before", before, MAX_U32)
    d: Dict[str, Any] = {"user": _user(user)}
    if before:
        d["before"] = before
    body = pack(_write_id_into(d, write_id))

    def parse(b: Any, frame: Frame) -> TrimResult:
        b = _map(b, "trim")
        return TrimResult(
            _field(b, "trimmed", int, "an integer", "trim"),
            _field(b, "remaining", int, "an integer", "trim"),
            b.get("duplicate") is True,
        )

    return Request(Op.TRIM, body, False, parse)


def delete_request(user: UserId, write_id: Optional[bytes] = None) -> Request:
    """delete: the whole profile, durably."""
    body = pack(_write_id_into({"user": _user(user)}, write_id))

    def parse(b: Any, frame: Frame) -> DeleteResult:
        b = _map(b, "delete")
        return DeleteResult(
            _field(b, "deleted", bool, "a bool", "delete"), b.get("duplicate") is True
        )

    return Request(Op.DELETE, body, False, parse)


def _condition(condition: Union[Condition, str, None]) -> Optional[str]:
    if condition is None:
        return None
    try:
        return Condition(condition).value
    except ValueError:
        raise InvalidArgument(
            f"condition: {condition!r} is not one of 'nx', 'xx', 'gt', 'lt' (or None)"
        ) from None


def _outcome(code: Any) -> Union[ExpireOutcome, int]:
    if not isinstance(code, int) or isinstance(code, bool):
        raise ProtocolError(f"expire answer: an outcome is not an integer: {code!r}")
    try:
        return ExpireOutcome(code)
    except ValueError:
        return code  # an outcome newer than this client


def expire_request(
    user: UserId,
    ids: Iterable[int],
    value: int,
    ttl: bool = False,
    condition: Union[Condition, str, None] = None,
    write_id: Optional[bytes] = None,
) -> Request:
    """expire: set these segments' expiry (``value``: Unix seconds, 0 never;
    with ``ttl`` seconds from now) where ``condition`` holds."""
    ids = list(ids)
    for i in ids:
        _check_uint("ids", i, MAX_U64)
    _check_uint("value", value, MAX_U32)
    d: Dict[str, Any] = {"user": _user(user), "ids": ids, "value": value}
    if ttl:
        d["ttl"] = True
    cond = _condition(condition)
    if cond is not None:
        d["condition"] = cond
    body = pack(_write_id_into(d, write_id))

    def parse(b: Any, frame: Frame) -> ExpireResult:
        b = _map(b, "expire")
        results = _field(b, "results", list, "a list", "expire")
        return ExpireResult(
            [_outcome(r) for r in results],
            _field(b, "count", int, "an integer", "expire"),
            b.get("duplicate") is True,
        )

    return Request(Op.EXPIRE, body, False, parse)


def _field_write_result(b: Any, op: str) -> FieldWriteResult:
    b = _map(b, op)
    return FieldWriteResult(
        _field(b, "changed", int, "an integer", op),
        _field(b, "count", int, "an integer", op),
        b.get("duplicate") is True,
    )


def field_set_request(
    user: UserId, fields: Iterable[FieldUpdate], write_id: Optional[bytes] = None
) -> Request:
    """field_set: set these fields of one user, each whole (value, type, expiry)."""
    if isinstance(fields, (str, bytes)) or not isinstance(fields, Iterable):
        raise InvalidArgument("fields: expected a list of FieldUpdate")
    wire = []
    for i, f in enumerate(fields):
        if not isinstance(f, FieldUpdate):
            raise InvalidArgument(f"fields[{i}]: expected a FieldUpdate")
        wire.append(f.to_wire(_wire_value(f.value)))
    body = pack(_write_id_into({"user": _user(user), "fields": wire}, write_id))
    return Request(Op.FIELD_SET, body, False, lambda b, frame: _field_write_result(b, "field_set"))


def field_del_request(
    user: UserId, names: Iterable[FieldName], write_id: Optional[bytes] = None
) -> Request:
    """field_del: delete these fields of one user."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise InvalidArgument("names: expected a list of field names, not one")
    names = [check_field_name(n, f"names[{i}]") for i, n in enumerate(names)]
    body = pack(_write_id_into({"user": _user(user), "names": names}, write_id))
    return Request(Op.FIELD_DEL, body, False, lambda b, frame: _field_write_result(b, "field_del"))


def field_incr_request(
    user: UserId,
    name: FieldName,
    delta: int = 1,
    ttl: int = 0,
    window: str = "fixed",
    cap: Optional[int] = None,
    write_id: Optional[bytes] = None,
) -> Request:
    """field_incr: add ``delta`` to a counter, refusing to pass ``cap``."""
    check_field_name(name)
    if isinstance(delta, bool) or not isinstance(delta, int):
        raise InvalidArgument("delta: expected an int")
    check_field_value(delta, "delta")
    _check_uint("ttl", ttl, MAX_U32)
    if window not in ("fixed", "sliding"):
        raise InvalidArgument(f"window: {window!r} is not one of 'fixed', 'sliding'")
    d: Dict[str, Any] = {"user": _user(user), "name": name, "delta": delta}
    if ttl:
        d["ttl"] = ttl
    if window == "sliding":
        d["window"] = "sliding"
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, int):
            raise InvalidArgument("cap: expected an int")
        d["cap"] = check_field_value(cap, "cap")
    body = pack(_write_id_into(d, write_id))

    def parse(b: Any, frame: Frame) -> IncrementResult:
        b = _map(b, "field_incr")
        return IncrementResult(
            _field(b, "value", int, "an integer", "field_incr"),
            _field(b, "capped", bool, "a bool", "field_incr"),
            b.get("duplicate") is True,
        )

    return Request(Op.FIELD_INCR, body, False, parse)


def field_max_request(
    user: UserId,
    name: FieldName,
    value: FieldValue,
    expiry: int = 0,
    ttl: bool = False,
    write_id: Optional[bytes] = None,
) -> Request:
    """field_max: keep the larger of the field's value and ``value`` (an int,
    a float or a Time), with ``expiry`` when ``value`` is kept."""
    f = FieldUpdate(name, value, expiry, ttl)
    if isinstance(f.value, (str, bytes)):
        raise InvalidArgument("value: field_max takes an int, a float or a Time")
    d: Dict[str, Any] = {"user": _user(user), "name": name, "value": _wire_value(f.value)}
    if expiry:
        d["expiry"] = expiry
    if ttl:
        d["ttl"] = True
    body = pack(_write_id_into(d, write_id))

    def parse(b: Any, frame: Frame) -> FieldMaxResult:
        b = _map(b, "field_max")
        if "value" not in b:
            raise ProtocolError("field_max answer: no 'value'")
        return FieldMaxResult(
            _field_value(b["value"], "field_max"),
            _field(b, "replaced", bool, "a bool", "field_max"),
            b.get("duplicate") is True,
        )

    return Request(Op.FIELD_MAX, body, False, parse)


# profile bridging (PROTOCOL.md, "Linked profiles")


def link_request(
    user: UserId, master: UserId, ttl: int = 0, write_id: Optional[bytes] = None
) -> Request:
    """link: ``user`` joins the group of ``master``, its link lasting ``ttl``
    seconds (0: never)."""
    _check_uint("ttl", ttl, MAX_U32)
    d: Dict[str, Any] = {"user": _user(user), "master": _user(master, "master")}
    if ttl:
        d["ttl"] = ttl
    body = pack(_write_id_into(d, write_id))

    def parse(b: Any, frame: Frame) -> LinkResult:
        b = _map(b, "link")
        return LinkResult(
            master=_user_field(b, "master", "link"),
            members=_field(b, "members", int, "an integer", "link"),
            moved=_field(b, "moved", int, "an integer", "link"),
        )

    return Request(Op.LINK, body, False, parse)


def unlink_request(user: UserId, write_id: Optional[bytes] = None) -> Request:
    """unlink: ``user`` leaves its group (a master's unlink dissolves it)."""
    body = pack(_write_id_into({"user": _user(user)}, write_id))

    def parse(b: Any, frame: Frame) -> bool:
        return _field(_map(b, "unlink"), "unlinked", bool, "a bool", "unlink")

    return Request(Op.UNLINK, body, False, parse)


def _parse_master_of(body: Any, frame: Frame) -> UserId:
    return _user_field(_map(body, "master_of"), "master", "master_of")


def master_of_request(user: UserId) -> Request:
    """master_of: the master of the user's group (NotFound: in no group)."""
    return Request(Op.MASTER_OF, pack({"user": _user(user)}), True, _parse_master_of)


def _parse_links(body: Any, frame: Frame) -> LinksPage:
    op = "links"
    b = _map(body, op)
    links = []
    for i, entry in enumerate(_field(b, "links", list, "a list", op)):
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not isinstance(entry[0], (bytes, str))
            or not isinstance(entry[1], int)
            or isinstance(entry[1], bool)
        ):
            raise ProtocolError(f"{op} answer: links[{i}] is not [user, expires_at]: {entry!r}")
        links.append(LinkedUser(user_id_of(entry[0]), entry[1]))
    nxt: Optional[UserId] = None
    if b.get("next"):  # absent (or empty) on the last page
        nxt = _user_field(b, "next", op)
    return LinksPage(_user_field(b, "master", op), links, nxt)


def links_request(user: UserId, cursor: Optional[UserId] = None, limit: int = 0) -> Request:
    """links: a page of the members of the user's group, sorted, after
    ``cursor`` (None: from the start), at most ``limit`` (0: the server's 100)."""
    _check_uint("limit", limit, MAX_U32)
    d: Dict[str, Any] = {"user": _user(user)}
    if cursor is not None and cursor != b"" and cursor != "":
        d["cursor"] = _user(cursor, "cursor")
    if limit:
        d["limit"] = limit
    return Request(Op.LINKS, pack(d), True, _parse_links)


def _parse_connected(body: Any, frame: Frame) -> bool:
    return _field(_map(body, "connected"), "connected", bool, "a bool", "connected")


def connected_request(a: UserId, b: UserId) -> Request:
    """connected: whether ``a`` and ``b`` are in one group (or are one user)."""
    return Request(
        Op.CONNECTED, pack({"a": _user(a, "a"), "b": _user(b, "b")}), True, _parse_connected
    )


def _is_uint(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_scan(body: Any, frame: Frame) -> ScanPage:
    op = "scan"
    b = _map(body, op)
    profiles = []
    for i, raw in enumerate(_field(b, "profiles", list, "a list", op)):
        at = f"profiles[{i}]"
        pm = _map(raw, f"{op} {at}")
        segments = []
        for j, seg in enumerate(_field(pm, "segments", list, "a list", op)):
            if (
                not isinstance(seg, list)
                or not 2 <= len(seg) <= 4
                or not all(_is_uint(x) for x in seg[:2])
                or not all(x is None or _is_uint(x) for x in seg[2:])
            ):
                raise ProtocolError(
                    f"{op} answer: {at}.segments[{j}] is not [id, expires_at, attr1?, attr2?]"
                )
            segments.append(Segment(*seg))
        members = []
        for j, m in enumerate(pm.get("members") or []):
            if not isinstance(m, list) or len(m) != 2 or not _is_uint(m[1]):
                raise ProtocolError(f"{op} answer: {at}.members[{j}] is not [user, expires_at]")
            members.append(LinkedUser(user_id_of(m[0]), m[1]))
        master = pm.get("master")
        profiles.append(
            ScannedProfile(
                user=_user_field(pm, "user", op),
                segments=segments,
                fields=_fields(pm, op) or {},
                master=None if master is None else user_id_of(master),
                link_expires=pm.get("link_expires", 0) if master is not None else 0,
                members=members,
            )
        )
    return ScanPage(_field(b, "cursor", int, "an integer", op), profiles, frame.stale)


def scan_request(partition: int, cursor: int = 0, max_bytes: int = 0) -> Request:
    """scan: one page of a partition's profiles, decoded (backups, exports)."""
    _check_uint("partition", partition, MAX_U32)
    _check_uint("cursor", cursor, MAX_U64)
    _check_uint("max_bytes", max_bytes, MAX_U32)
    d: Dict[str, Any] = {"partition": partition, "cursor": cursor}
    if max_bytes:
        d["max_bytes"] = max_bytes
    return Request(Op.SCAN, pack(d), True, _parse_scan)


# node to node


def _parse_copy(body: Any, frame: Frame) -> CopyPartitionResult:
    op = "copy_partition"
    b = _map(body, op)
    records = []
    for i, r in enumerate(_field(b, "records", list, "a list", op)):
        # [key, body, sweep_at, void_at], and the user the record names when
        # it names one (a fifth). Not repr'd: a body may be megabytes.
        if (
            not isinstance(r, list)
            or len(r) not in (4, 5)
            or not all(isinstance(x, bytes) for x in r[:2] + r[4:])
            or not _is_uint(r[2])
            or not _is_uint(r[3])
        ):
            raise ProtocolError(
                f"{op} answer: records[{i}] is not [key, body, sweep_at, void_at, reference?]"
            )
        records.append(CopiedRecord(*r))
    return CopyPartitionResult(
        next=_field(b, "next", int, "an integer", op),
        cursor=_field(b, "cursor", int, "an integer", op),
        records=records,
    )


def copy_partition_request(
    partition: int, cursor: int = 0, min_next: int = 0, max_bytes: int = 0
) -> Request:
    """copy_partition: one page of a partition's records (node to node)."""
    _check_uint("partition", partition, MAX_U32)
    _check_uint("cursor", cursor, MAX_U64)
    _check_uint("min_next", min_next, MAX_U64)
    _check_uint("max_bytes", max_bytes, MAX_U32)
    d: Dict[str, Any] = {"partition": partition, "cursor": cursor}
    if min_next:
        d["min_next"] = min_next
    if max_bytes:
        d["max_bytes"] = max_bytes
    return Request(Op.COPY_PARTITION, pack(d), True, _parse_copy)


def _step_kind(kind: Union[StepKind, str]) -> str:
    try:
        return StepKind(kind).value
    except ValueError:
        raise InvalidArgument(
            f"kind: {kind!r} is not one of 'list', 'name', 'name_moved', 'drop', 'clear', "
            "'delete_member', 'delete'"
        ) from None


def _moving(moving: Iterable[Union[LinkedUser, Tuple[UserId, int]]]) -> List[list]:
    if isinstance(moving, (str, bytes)) or not isinstance(moving, Iterable):
        raise InvalidArgument("moving: expected a list of LinkedUser or (user, expires_at)")
    out = []
    for i, m in enumerate(moving):
        if isinstance(m, LinkedUser):
            m = (m.user, m.expires_at)
        if isinstance(m, (str, bytes)) or not isinstance(m, Sequence) or len(m) != 2:
            raise InvalidArgument(f"moving[{i}]: {m!r} is not a LinkedUser or (user, expires_at)")
        _check_uint(f"moving[{i}].expires_at", m[1], MAX_U32)
        out.append([_user(m[0], f"moving[{i}].user"), m[1]])
    return out


def _parse_link_step(body: Any, frame: Frame) -> LinkStepResult:
    op = "link_step"
    b = _map(body, op)
    return LinkStepResult(
        applied=_field(b, "applied", bool, "a bool", op),
        changed=_field(b, "changed", bool, "a bool", op),
        members=_field(b, "members", int, "an integer", op),
        duplicate=b.get("duplicate") is True,
    )


def link_step_request(
    user: UserId,
    kind: Union[StepKind, str],
    *,
    master: Optional[UserId] = None,
    member: Optional[UserId] = None,
    expect: Optional[UserId] = None,
    expires: int = 0,
    moving: Iterable[Union[LinkedUser, Tuple[UserId, int]]] = (),
    listed: Iterable[UserId] = (),
    stale: bool = False,
    members_too: bool = False,
    max_links: int = 0,
    write_id: Optional[bytes] = None,
) -> Request:
    """link_step: one single-record step of a link, unlink or grouped delete,
    on a node holding ``user`` (node to node).

    A field that is None, empty, 0 or false is left out, in the order the
    C++ client writes the rest. Which kind needs which field is the
    server's to check (InvalidArgument); the entries of ``moving`` and
    ``listed`` count against max_batch.
    """
    _check_uint("expires", expires, MAX_U32)
    _check_uint("max_links", max_links, MAX_U32)
    d: Dict[str, Any] = {"user": _user(user), "kind": _step_kind(kind)}
    for key, value in (("master", master), ("member", member), ("expect", expect)):
        if value is not None and value != b"" and value != "":
            d[key] = _user(value, key)
    if expires:
        d["expires"] = expires
    moving_ = _moving(moving)
    if moving_:
        d["moving"] = moving_
    listed_ = _users(listed, "listed")
    if listed_:
        d["listed"] = listed_
    if stale:
        d["stale"] = True
    if members_too:
        d["members_too"] = True
    if max_links:
        d["max_links"] = max_links
    body = pack(_write_id_into(d, write_id))
    return Request(Op.LINK_STEP, body, False, _parse_link_step, max(len(moving_), len(listed_)))


def _stored_record(e: Mapping[str, Any], stale: bool) -> StoredRecord:
    op = "read_records"
    return StoredRecord(
        _field(e, "body", bytes, "binary", op), _field(e, "reference", bytes, "binary", op), stale
    )


def read_records_request(users: Sequence[UserId]) -> Request:
    """read_records: the records of ``users`` (at least one) as stored (node to node).

    Each result is a StoredRecord, or the SegstoreError of that user alone
    (NotFound for a user without a record, WrongNode for one the node does
    not serve), in its place.
    """
    users = _users(users, "users")
    if not users:
        raise InvalidArgument("users: read_records needs at least one user")

    def parse(body: Any, frame: Frame) -> List[Union[StoredRecord, SegstoreError]]:
        stale = frame.stale
        return _results(body, "read_records", users, lambda e: _stored_record(e, stale))

    return Request(Op.READ_RECORDS, pack({"users": users}), True, parse, len(users))


# anything


def raw_request(
    op: int, body: Union[bytes, Mapping[str, Any], None] = None, *, idempotent: bool = False
) -> Request:
    """Any operation: ``body`` a mapping (packed here) or bytes sent as they are.

    The result is the answer's decoded body (``{}`` for none). For operations
    newer than this client, and for tests.
    """
    _check_uint("op", op, 0xFF)
    if body is None:
        data = b""
    elif isinstance(body, (bytes, bytearray)):
        data = bytes(body)
    else:
        data = pack(dict(body))
    return Request(op, data, idempotent, lambda b, frame: b)


__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FLAG_STALE",
    "Frame",
    "FrameReader",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_RESPONSE_BYTES",
    "Op",
    "Request",
    "Status",
    "VERSION",
    "batch_get_request",
    "batch_upsert_request",
    "cluster_map_request",
    "connected_request",
    "copy_partition_request",
    "scan_request",
    "count_request",
    "decode_frame",
    "decode_response",
    "delete_request",
    "encode_frame",
    "error_of",
    "expire_request",
    "get_request",
    "hello_request",
    "link_request",
    "link_step_request",
    "links_request",
    "master_of_request",
    "op_name",
    "pack",
    "ping_request",
    "raw_request",
    "read_records_request",
    "remove_request",
    "stats_request",
    "trim_request",
    "unlink_request",
    "unpack_body",
    "upsert_request",
    "user_id_of",
]
