"""The values the client takes and returns: request options and typed results.

Times are Unix seconds (``int``); an expiry of ``0`` means *never*. A user
ID is a ``str`` (sent as UTF-8, a MessagePack str) or ``bytes`` (sent as a
MessagePack bin, for IDs that are not UTF-8); the server sees only the bytes,
so ``"alice"`` and ``b"alice"`` name the same user. A user ID the server
answers with (a group's master, a linked user, a links cursor) comes back as
a ``str`` when its bytes are UTF-8, else as ``bytes``.
"""

from __future__ import annotations

import datetime as _dt
import enum
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from .errors import InvalidArgument

UserId = Union[str, bytes]

MAX_U32 = 2**32 - 1
MAX_U64 = 2**64 - 1


class Mode(str, enum.Enum):
    """How an upsert sets each segment's expiry (PROTOCOL.md, "upsert")."""

    SET = "set"
    """The expiry becomes the segment's value (a TTL or an absolute time)."""
    EXTEND = "extend"
    """As SET, but a segment keeps its current expiry when that is later."""
    ADD = "add"
    """``value`` seconds are added to the current expiry (new segments: now + value)."""


class Condition(str, enum.Enum):
    """When an expire changes a segment (PROTOCOL.md, "expire"); never counts as +infinity."""

    NX = "nx"
    """Only segments that never expire."""
    XX = "xx"
    """Only segments that expire."""
    GT = "gt"
    """Only where the new expiry is later than the current one."""
    LT = "lt"
    """Only where the new expiry is earlier."""


class ExpireOutcome(enum.IntEnum):
    """What an expire did to one listed segment ID."""

    MISSING = 0
    """The profile holds no live segment with this ID."""
    SET = 1
    """The segment's expiry became the new one (its attributes kept)."""
    REMOVED = 2
    """The new expiry was not in the future: the segment was removed."""
    UNCHANGED = 3
    """The condition did not hold."""


class StepKind(str, enum.Enum):
    """What one link_step does to its record (PROTOCOL.md, "link_step"; node to node)."""

    LIST = "list"
    """``user`` (the target) lists ``member`` and ``moving``, dropping its expired links."""
    NAME = "name"
    """``user`` names ``master``, its link expiring ``expires``, and lists no members."""
    NAME_MOVED = "name_moved"
    """``user`` names ``master`` unless it names another than ``expect`` or ``master``."""
    DROP = "drop"
    """``user`` lists ``member`` no more."""
    CLEAR = "clear"
    """``user`` loses its link (if it names ``master``; with ``members_too`` its members)."""
    DELETE_MEMBER = "delete_member"
    """``user`` is deleted if it names ``master`` with a live link."""
    DELETE = "delete"
    """``user`` is deleted."""


class Projection(str, enum.Enum):
    """What a get lists for each segment."""

    FULL = "full"
    """IDs, expiries and attributes."""
    IDS = "ids"
    """Segment IDs only: the smallest answer."""


def _check_uint(name: str, value: int, top: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise InvalidArgument(f"{name}: {value!r} is not an integer in [0, {top}]")


def _unix_seconds(name: str, when: Union[int, _dt.datetime]) -> int:
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            raise InvalidArgument(f"{name}: a datetime needs a time zone (e.g. timezone.utc)")
        when = int(when.timestamp())
    _check_uint(name, when, MAX_U32)
    return when


# ---- profile fields (PROTOCOL.md, "Profile fields") ----

FieldName = Union[str, bytes]
MAX_FIELD_NAME_BYTES = 64
MAX_FIELD_NAMES_ASKED = 256
MIN_I64 = -(2**63)
MAX_I64 = 2**63 - 1


def _name_bytes(name: FieldName) -> bytes:
    return name.encode("utf-8") if isinstance(name, str) else bytes(name)


def check_field_name(name: FieldName, where: str = "name") -> FieldName:
    """``name`` when it is a field name (str or bytes, 1 to 64 bytes)."""
    if not isinstance(name, (str, bytes)):
        raise InvalidArgument(f"{where}: a field name is a str or bytes, not {type(name).__name__}")
    n = len(_name_bytes(name))
    if n == 0:
        raise InvalidArgument(f"{where}: an empty field name")
    if n > MAX_FIELD_NAME_BYTES:
        raise InvalidArgument(
            f"{where}: a field name of {n} bytes, the limit is {MAX_FIELD_NAME_BYTES}"
        )
    return name


@dataclass(frozen=True)
class Time:
    """A profile field's time value: Unix seconds, 0 to 2^32-1 (MessagePack's
    timestamp extension on the wire). A plain int is an int field."""

    seconds: int

    def __post_init__(self) -> None:
        _check_uint("time", self.seconds, MAX_U32)


FieldValue = Union[int, float, str, bytes, Time]
"""A field's value: int (64-bit), float (a double), str, bytes or :class:`Time`."""


def check_field_value(value: FieldValue, where: str = "value") -> FieldValue:
    """``value`` when it is a field value (bytearray as bytes)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, bytes, bytearray, Time)):
        raise InvalidArgument(
            f"{where}: a field value is an int, a float, a str, bytes or a Time, not "
            f"{type(value).__name__}"
        )
    if isinstance(value, int) and not MIN_I64 <= value <= MAX_I64:
        raise InvalidArgument(f"{where}: {value} is outside a 64-bit signed integer")
    return bytes(value) if isinstance(value, bytearray) else value


@dataclass(frozen=True)
class Field:
    """A live profile field in a get's answer: its value and expiry (0: never)."""

    value: FieldValue
    expires_at: int = 0


@dataclass(frozen=True)
class FieldUpdate:
    """One field of a field_set: ``[name, value, expiry, ttl]`` on the wire.

    ``expiry`` is an absolute Unix time (0: never expires), or with ``ttl``
    seconds from the server's now (at least 1).
    """

    name: FieldName
    value: FieldValue
    expiry: int = 0
    ttl: bool = False

    def __post_init__(self) -> None:
        check_field_name(self.name)
        object.__setattr__(self, "value", check_field_value(self.value))
        _check_uint("expiry", self.expiry, MAX_U32)

    def to_wire(self, wire_value) -> list:  # wire_value: the value's MessagePack form
        if self.ttl:
            return [self.name, wire_value, self.expiry, True]
        if self.expiry:
            return [self.name, wire_value, self.expiry]
        return [self.name, wire_value]


@dataclass(frozen=True)
class FieldWriteResult:
    """What field_set or field_del did: fields set (or live fields deleted),
    and the profile's live fields after."""

    changed: int
    count: int
    duplicate: bool = False


@dataclass(frozen=True)
class IncrementResult:
    """The counter after a field_incr; with ``capped``, the increment was
    refused (it would have passed the cap: nothing written) and ``value``
    is the counter as it is."""

    value: int
    capped: bool = False
    duplicate: bool = False


@dataclass(frozen=True)
class FieldMaxResult:
    """The field's value after a field_max, and whether it is the one given."""

    value: FieldValue
    replaced: bool = False
    duplicate: bool = False


@dataclass(frozen=True)
class GetOptions:
    """Which segments a get, batch_get (or count) reports; every field optional.

    Attributes:
        projection: ``"full"`` (IDs, expiries, attributes) or ``"ids"``.
        id_from, id_to: only segment IDs in ``[id_from, id_to]``.
        expiry_from, expiry_to: only segments expiring in that window, both
            ends included; a never-expiring segment counts as expiring at
            +infinity, so only the default ``expiry_to`` (2^32-1) includes it.
        outside_expiry: invert the expiry window.
        count_only: count the matches, list none.
        limit: list at most this many, lowest IDs first (0: all).
        own: read the user's own profile only, not the merged view of the
            group it is linked into (profile bridging; no effect for a user
            in no group).
        fields: profile fields to return too: ``True`` every live one, a
            list of names the live ones among them (at most 256); ``None``
            or ``False`` none (the default).
        field_prefix: profile fields whose name starts with this (str or
            bytes, at most 64 bytes); not with ``fields``.
    """

    projection: Union[Projection, str] = Projection.FULL
    id_from: int = 0
    id_to: int = MAX_U64
    expiry_from: int = 0
    expiry_to: int = MAX_U32
    outside_expiry: bool = False
    count_only: bool = False
    limit: int = 0
    own: bool = False
    fields: Union[bool, Sequence[FieldName], None] = None
    field_prefix: Optional[FieldName] = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "projection", Projection(self.projection))
        except ValueError:
            raise InvalidArgument(
                f"projection: {self.projection!r} is not one of 'full', 'ids'"
            ) from None
        _check_uint("id_from", self.id_from, MAX_U64)
        _check_uint("id_to", self.id_to, MAX_U64)
        _check_uint("expiry_from", self.expiry_from, MAX_U32)
        _check_uint("expiry_to", self.expiry_to, MAX_U32)
        _check_uint("limit", self.limit, MAX_U32)
        if self.field_prefix is not None:
            if self.fields:
                raise InvalidArgument("fields and field_prefix: give one or the other")
            if not isinstance(self.field_prefix, (str, bytes)):
                raise InvalidArgument("field_prefix: expected a str or bytes")
            if len(_name_bytes(self.field_prefix)) > MAX_FIELD_NAME_BYTES:
                raise InvalidArgument(
                    f"field_prefix: longer than {MAX_FIELD_NAME_BYTES} bytes"
                )
        if self.fields is not None and not isinstance(self.fields, bool):
            if isinstance(self.fields, (str, bytes)):
                raise InvalidArgument("fields: expected True or a list of names, not one name")
            names = tuple(self.fields)
            if len(names) > MAX_FIELD_NAMES_ASKED:
                raise InvalidArgument(
                    f"fields: {len(names)} names, at most {MAX_FIELD_NAMES_ASKED}"
                )
            for i, n in enumerate(names):
                check_field_name(n, f"fields[{i}]")
            object.__setattr__(self, "fields", names)


@dataclass(frozen=True)
class SegmentUpdate:
    """One segment of an upsert: ``[id, value, ttl, attr1, attr2]`` on the wire.

    In modes ``set`` and ``extend``, ``value`` is a TTL in seconds when
    ``ttl`` is true (at least 1), otherwise an absolute Unix time (``0``:
    never expires). In mode ``add`` it is the seconds to add (``ttl`` is
    ignored). ``attr1``/``attr2`` are set when given; ``None`` keeps the
    segment's current value (or clears it, in an upsert with ``replace_attrs``).

    The class methods say which one is meant::

        SegmentUpdate.expiring_in(5484, 5 * 3600)       # a TTL
        SegmentUpdate.expiring_at(8000, 1767225600, attr1=7)
        SegmentUpdate.forever(8500)
    """

    id: int
    value: int
    ttl: bool = False
    attr1: Optional[int] = None
    attr2: Optional[int] = None

    def __post_init__(self) -> None:
        _check_uint("segment id", self.id, MAX_U64)
        _check_uint(f"segment {self.id}: value", self.value, MAX_U32)
        if self.attr1 is not None:
            _check_uint(f"segment {self.id}: attr1", self.attr1, MAX_U32)
        if self.attr2 is not None:
            _check_uint(f"segment {self.id}: attr2", self.attr2, MAX_U32)

    @classmethod
    def expiring_in(
        cls, id: int, seconds: int, attr1: Optional[int] = None, attr2: Optional[int] = None
    ) -> "SegmentUpdate":
        """A segment that expires ``seconds`` after the server writes it."""
        return cls(id, seconds, True, attr1, attr2)

    @classmethod
    def expiring_at(
        cls,
        id: int,
        when: Union[int, _dt.datetime],
        attr1: Optional[int] = None,
        attr2: Optional[int] = None,
    ) -> "SegmentUpdate":
        """A segment that expires at ``when`` (Unix seconds or an aware datetime)."""
        return cls(id, _unix_seconds(f"segment {id}: expiry", when), False, attr1, attr2)

    @classmethod
    def forever(
        cls, id: int, attr1: Optional[int] = None, attr2: Optional[int] = None
    ) -> "SegmentUpdate":
        """A segment that never expires."""
        return cls(id, 0, False, attr1, attr2)

    def to_wire(self) -> list:
        """The segment's array, as short as its fields allow (as the C++ client sends it)."""
        if self.attr2 is not None:
            return [self.id, self.value, self.ttl, self.attr1, self.attr2]
        if self.attr1 is not None:
            return [self.id, self.value, self.ttl, self.attr1]
        if self.ttl:
            return [self.id, self.value, True]
        return [self.id, self.value]


SegmentLike = Union[SegmentUpdate, Tuple[int, ...], Sequence[int]]


def as_segment(s: SegmentLike) -> SegmentUpdate:
    """A SegmentUpdate from itself or a tuple ``(id, value[, ttl[, attr1[, attr2]]])``."""
    if isinstance(s, SegmentUpdate):
        return s
    try:
        return SegmentUpdate(*s)
    except TypeError as e:
        raise InvalidArgument(f"segment {s!r}: {e}") from None


def new_write_id() -> bytes:
    """16 random bytes (never all zero): a fresh ``write_id`` for one write.

    Keep it with the write and send the same one when sending that write
    again (a cluster with a log then applies it at most once). A single
    server ignores it.
    """
    while True:
        b = os.urandom(16)
        if any(b):
            return b


def check_write_id(write_id: Optional[bytes]) -> Optional[bytes]:
    """``write_id`` if it is None or 16 bytes not all zero; else InvalidArgument."""
    if write_id is None:
        return None
    if not isinstance(write_id, (bytes, bytearray)) or len(write_id) != 16 or not any(write_id):
        raise InvalidArgument("write_id: must be 16 bytes, not all zero (see new_write_id())")
    return bytes(write_id)


@dataclass(frozen=True)
class UpsertItem:
    """One item of a batch_upsert: an upsert of one user.

    ``mode`` None takes the batch's mode; ``write_id`` and ``replace_attrs``
    are the item's own.
    """

    user: UserId
    segments: Sequence[SegmentLike]
    mode: Union[Mode, str, None] = None
    write_id: Optional[bytes] = None
    replace_attrs: bool = False


# ---- results ----


@dataclass(frozen=True)
class ServerInfo:
    """The hello answer: who the server is and the limits it enforces."""

    protocol: int
    server: str
    max_frame_bytes: int
    max_batch: int
    max_key_bytes: int
    max_segments: int
    max_in_flight: int
    max_fields: int = 0  # live fields a profile may hold (0: a server older than fields)
    max_field_bytes: int = 0  # bytes of a string or bytes field value


@dataclass(frozen=True)
class Segment:
    """One live segment of a profile.

    ``expires_at`` is Unix seconds, ``0`` when it never expires, and ``None``
    when the get asked for IDs only.
    """

    id: int
    expires_at: Optional[int] = None
    attr1: Optional[int] = None
    attr2: Optional[int] = None

    @property
    def never_expires(self) -> bool:
        return self.expires_at == 0

    def expires_datetime(self) -> Optional[_dt.datetime]:
        """The expiry as an aware UTC datetime (None: never, or not asked for)."""
        if not self.expires_at:
            return None
        return _dt.datetime.fromtimestamp(self.expires_at, _dt.timezone.utc)


@dataclass(frozen=True)
class GetResult:
    """A profile's live segments matching the get's options, as columns.

    Attributes:
        count: live segments matching the options (all of them, whatever limit).
        ids: the listed segment IDs, ascending (empty with ``count_only``).
        expires: their expiries (0: never), or None with projection "ids".
        attr1, attr2: their attributes (None where a segment has none), or
            None when no listed segment has one.
        stale: the server flagged the answer stale (a cluster replica that
            may be behind its log; never from a single server).
        master: for a user linked into a group (profile bridging), the
            group's master: the answer is the group's merged view. None for
            a user in no group, and for a get with ``own``.
        profiles: how many profiles the merged view merged (the master's
            and its members'); 0 when ``master`` is None.
        fields: the live profile fields asked for (GetOptions ``fields`` or
            ``field_prefix``), by name (a linked user's: its master's); None
            when none were asked.
    """

    count: int
    ids: List[int] = field(default_factory=list)
    expires: Optional[List[int]] = None
    attr1: Optional[List[Optional[int]]] = None
    attr2: Optional[List[Optional[int]]] = None
    stale: bool = False
    master: Optional[UserId] = None
    profiles: int = 0
    fields: Optional[Dict[FieldName, Field]] = None

    @property
    def merged(self) -> bool:
        """Whether this is a group's merged view (``master`` is set)."""
        return self.master is not None

    @property
    def segments(self) -> List[Segment]:
        """The rows as :class:`Segment` objects."""
        n = len(self.ids)
        expires = self.expires if self.expires is not None else [None] * n
        attr1 = self.attr1 if self.attr1 is not None else [None] * n
        attr2 = self.attr2 if self.attr2 is not None else [None] * n
        return [Segment(*row) for row in zip(self.ids, expires, attr1, attr2)]


@dataclass(frozen=True)
class CountResult:
    """Live segments with IDs in the range; ``stale`` as in :class:`GetResult`."""

    count: int
    stale: bool = False


@dataclass(frozen=True)
class UpsertResult:
    """What an upsert did.

    Attributes:
        inserted: segments that were not live before.
        updated: live segments the request named (changed or not).
        trimmed: expired segments removed by this write.
        count: live segments after the write.
        duplicate: a cluster had made this write before under its write_id.
    """

    inserted: int
    updated: int
    trimmed: int
    count: int
    duplicate: bool = False


@dataclass(frozen=True)
class RemoveResult:
    """How many of the IDs the profile held live."""

    removed: int
    duplicate: bool = False


@dataclass(frozen=True)
class TrimResult:
    """Segments trimmed and segments remaining."""

    trimmed: int
    remaining: int
    duplicate: bool = False


@dataclass(frozen=True)
class DeleteResult:
    """Whether there was a profile (a live segment) to delete."""

    deleted: bool
    duplicate: bool = False

    def __bool__(self) -> bool:
        return self.deleted


@dataclass(frozen=True)
class ExpireResult:
    """One outcome per listed ID, in the order listed, and the live segments after.

    ``results`` is empty (and ``count`` 0) for a duplicate whose first answer
    the cluster node no longer knows.
    """

    results: List[ExpireOutcome]
    count: int
    duplicate: bool = False


@dataclass(frozen=True)
class LinkResult:
    """What a link did (profile bridging).

    Attributes:
        master: the group's master after the link (the master asked for,
            or its own master when it was a member: groups are stars).
        members: users linked to the master now (the master not counted).
        moved: members of the user's own former group (it was a master)
            that moved into the new group with it.
    """

    master: UserId
    members: int
    moved: int = 0


@dataclass(frozen=True)
class LinkedUser:
    """One member of a group: its user ID and when its link expires (0: never)."""

    user: UserId
    expires_at: int = 0

    @property
    def never_expires(self) -> bool:
        return self.expires_at == 0

    def expires_datetime(self) -> Optional[_dt.datetime]:
        """The link's expiry as an aware UTC datetime (None: never)."""
        if not self.expires_at:
            return None
        return _dt.datetime.fromtimestamp(self.expires_at, _dt.timezone.utc)


@dataclass(frozen=True)
class LinksPage:
    """One page of a group's members, sorted by user ID.

    Attributes:
        master: the group's master (not listed among ``links``).
        links: the members after the cursor asked, at most the limit asked.
        next: the cursor of the next page (pass it as ``cursor``), or None
            when this is the last page.
    """

    master: UserId
    links: List[LinkedUser] = field(default_factory=list)
    next: Optional[UserId] = None

    @property
    def users(self) -> List[UserId]:
        """The members' user IDs, in order."""
        return [link.user for link in self.links]

    @property
    def more(self) -> bool:
        """Whether there is a next page."""
        return self.next is not None


@dataclass(frozen=True)
class Node:
    """A cluster node in a partition map (``resp``: its RESP port, when it has one)."""

    id: str
    address: str
    rack: str = ""
    resp: str = ""


@dataclass(frozen=True)
class ClusterMap:
    """The partition map (PROTOCOL.md, "cluster_map").

    A single server answers ``cluster=False`` with every other field empty.
    ``partitions[p]`` lists the indices into ``nodes`` of partition p's
    replicas; ``incoming`` lists ``(partition, node index)`` moves in progress.
    """

    cluster: bool
    revision: int = 0
    self_id: str = ""
    replication: int = 0
    nodes: List[Node] = field(default_factory=list)
    partitions: List[List[int]] = field(default_factory=list)
    incoming: List[Tuple[int, int]] = field(default_factory=list)
    log: bool = False
    passive: bool = False


@dataclass(frozen=True)
class CopiedRecord:
    """One stored record of a copy_partition page (node to node).

    ``reference`` is the user the record names (a linked profile's master),
    ``b""`` for none.
    """

    key: bytes
    body: bytes
    sweep_at: int
    void_at: int
    reference: bytes = b""


COPY_FINISHED = 2**32
"""A copy_partition cursor past the end: the partition is finished."""


@dataclass(frozen=True)
class CopyPartitionResult:
    """One page of a partition's records (node to node; clients have no need of it)."""

    next: int
    cursor: int
    records: List[CopiedRecord] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.cursor == COPY_FINISHED


SCAN_FINISHED = 2**32
"""A scan cursor past the end: the partition is finished."""


@dataclass(frozen=True)
class ScannedProfile:
    """One user's profile as a scan reads it (PROTOCOL.md, "scan"): its own
    live segments (by ID), its own live fields, and its record's side of a
    link: ``master`` and ``link_expires`` for a member, ``members`` for a
    master (``0``: never expires)."""

    user: UserId
    segments: List[Segment] = field(default_factory=list)
    fields: Dict[FieldName, Field] = field(default_factory=dict)
    master: Optional[UserId] = None
    link_expires: int = 0
    members: List[LinkedUser] = field(default_factory=list)


@dataclass(frozen=True)
class ScanPage:
    """One page of a partition's profiles; send ``cursor`` back for the next
    until ``finished``. ``stale``: a cluster node's copy may be behind its log."""

    cursor: int
    profiles: List[ScannedProfile] = field(default_factory=list)
    stale: bool = False

    @property
    def finished(self) -> bool:
        return self.cursor == SCAN_FINISHED


@dataclass(frozen=True)
class LinkStepResult:
    """What one link_step did (node to node; clients have no need of it).

    Attributes:
        applied: the record changed.
        changed: the record was not as the coordinator read it: the
            operation starts over.
        members: after a ``list`` step, the target's members.
        duplicate: a cluster had applied this step before under its write_id.
    """

    applied: bool
    changed: bool
    members: int = 0
    duplicate: bool = False


@dataclass(frozen=True)
class StoredRecord:
    """One user's record as stored, from read_records (node to node).

    Attributes:
        body: the stored record body as is (the profile codec's bytes, opaque).
        reference: the user the record names (a linked profile's master),
            ``b""`` for none.
        stale: as in :class:`GetResult`: the answer came from a copy that
            may be behind its log.
    """

    body: bytes
    reference: bytes = b""
    stale: bool = False
