"""The synchronous client: one blocking connection, every operation.

Each call sends one request and waits for its answer; :meth:`Client.pipeline`
sends many before reading their answers. A lost connection is reopened by
the next call. A read whose connection broke before its answer is sent once
more on a fresh connection; a write never is: it raises ConnectionLost with
``maybe_applied`` set (proto/PROTOCOL.md, "End of stream").

A Client is not thread-safe: use it from one thread at a time (one client
per thread, or a pool).
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import time
from collections import deque
from typing import (
    Any,
    Deque,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import protocol as p
from ._base import ClientBase, Lost, NotSent, TimedOut, get_options, reason
from .errors import ProtocolError, SegstoreError, Timeout, Unavailable
from .models import (
    MAX_U64,
    ClusterMap,
    Condition,
    CopyPartitionResult,
    ScanPage,
    CountResult,
    DeleteResult,
    ExpireResult,
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
    RemoveResult,
    SegmentLike,
    ServerInfo,
    StepKind,
    StoredRecord,
    TrimResult,
    UpsertItem,
    UpsertResult,
    UserId,
)
from .options import DEFAULT_CLIENT_NAME, DEFAULT_PORT, TlsSetting, make_options, parse_address

_RECV_BYTES = 256 * 1024
_PIPELINE_BYTES = 1 << 20  # request bytes a pipeline keeps unanswered at most


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


class _Connection:
    """One socket (TCP or TLS) and the frames read from it, for one thread."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address
        self.closed = False
        # An error frame with request_id 0: the server is closing the
        # connection, and says why.
        self.close_reason: Optional[SegstoreError] = None
        self._reader = p.FrameReader()
        self._frames: Deque[p.Frame] = deque()
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._timeout: Optional[float] = -1.0

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def _set_timeout(self, deadline: Optional[float]) -> None:
        if deadline is None:
            timeout = None
        else:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise TimedOut()
        if timeout != self._timeout:
            self.sock.settimeout(timeout)
            self._timeout = timeout

    def _take(self, data: bytes) -> None:
        try:
            frames = self._reader.feed(data)
        except ProtocolError:
            self.close()
            raise
        for f in frames:
            if f.request_id == 0 and f.status != 0:
                self.close_reason = p.error_of(f, self.address)
            else:
                self._frames.append(f)

    def send(self, data: bytes, deadline: Optional[float]) -> None:
        """Hands ``data`` to the kernel whole, or raises NotSent (closing)."""
        try:
            self._set_timeout(deadline)
            self.sock.sendall(data)
        except (TimedOut, TimeoutError):
            # Part of a frame may be out: the stream is no longer in step.
            self.close()
            raise TimedOut() from None
        except OSError as e:
            self.close()
            raise NotSent(reason(e)) from None

    def read_frame(self, deadline: Optional[float]) -> p.Frame:
        """The next frame; TimedOut (the connection stays), Lost or ProtocolError."""
        while not self._frames:
            if self.closed:
                raise Lost("closed", self.close_reason)
            self._set_timeout(deadline)
            try:
                data = self.sock.recv(_RECV_BYTES)
            except TimeoutError:
                raise TimedOut() from None
            except OSError as e:
                self.close()
                raise Lost(reason(e), self.close_reason) from None
            if not data:
                self.close()
                raise Lost("the server closed it", self.close_reason)
            self._take(data)
        return self._frames.popleft()

    def looks_dead(self) -> bool:
        """Whether the server has closed this idle connection (or is closing it).

        Looks without blocking, so a request is not written into a connection
        that is already gone (a server restart, its idle timeout).
        """
        if self.closed or self.close_reason is not None:
            return True
        if not self._poll.poll(0):
            return False
        try:
            self.sock.settimeout(0)
            self._timeout = 0
            data = self.sock.recv(_RECV_BYTES)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False  # TLS records without data (a session ticket, say)
        except OSError:
            self.close()
            return True
        if not data:
            self.close()
            return True
        try:
            self._take(data)  # a late answer to a request that timed out
        except ProtocolError:
            return True
        return self.close_reason is not None


class Client(ClientBase):
    """A synchronous segstore client over one connection.

    Args:
        host, port: the server (``Client.from_address("host:port")`` parses one).
        timeout: seconds to wait for each answer (None: forever). A request
            that times out raises Timeout; the connection stays open and its
            late answer is dropped.
        connect_timeout: seconds for connecting, the TLS handshake and the
            hello answer together (None: forever).
        tls: None (plain TCP), True (TLS, the system's trust store), a
            :class:`~segstore.TlsOptions` or an ``ssl.SSLContext``.
        auth_secret, auth_secret_file: the server's shared secret (or a file
            of secrets in segstored's format, its first one), sent in hello.
            Send it only over TLS or on a network you trust.
        hello: say hello on connecting and keep the server's limits, so a
            request over ``max_frame_bytes`` or a batch over ``max_batch``
            is refused here (LimitExceeded) rather than sent. A secret
            makes the client say hello anyway.
        client_name: the name sent in hello, for the server's log.
        retry_reads: send a read once more, on a fresh connection, when its
            connection broke before the answer.

    Use it as a context manager to close it::

        with segstore.Client("127.0.0.1", 7700) as c:
            c.upsert("alice", [SegmentUpdate.expiring_in(5484, 3600)])
            print(c.get("alice").ids)
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        timeout: Optional[float] = 5.0,
        connect_timeout: Optional[float] = 5.0,
        tls: TlsSetting = None,
        auth_secret: Union[str, bytes, None] = None,
        auth_secret_file: Union[str, os.PathLike, None] = None,
        hello: bool = True,
        client_name: str = DEFAULT_CLIENT_NAME,
        retry_reads: bool = True,
    ) -> None:
        super().__init__(
            make_options(
                host,
                port,
                timeout=timeout,
                connect_timeout=connect_timeout,
                tls=tls,
                auth_secret=auth_secret,
                auth_secret_file=auth_secret_file,
                hello=hello,
                client_name=client_name,
                retry_reads=retry_reads,
            )
        )
        self._conn: Optional[_Connection] = None
        self._ssl: Optional[ssl.SSLContext] = None

    @classmethod
    def from_address(cls, address: str, **kwargs: Any) -> "Client":
        """A client of ``"host:port"`` (``"[::1]:7700"`` for IPv6); kwargs as the constructor's."""
        host, port = parse_address(address)
        return cls(host, port, **kwargs)

    # ---- connection ----

    @property
    def connected(self) -> bool:
        """Whether a connection is open (it may still turn out to be broken)."""
        return self._conn is not None and not self._conn.closed

    def connect(self) -> "Client":
        """Opens the connection now (calls open it when needed); returns the client."""
        self._connection()
        return self

    def close(self) -> None:
        """Closes the connection; a later call opens a new one."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Client":
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        return f"<segstore.Client {self.address} {state}>"

    def _connection(self) -> _Connection:
        if self._conn is not None and self._conn.looks_dead():
            self._conn.close()
            self._conn = None
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> _Connection:
        o = self._options
        deadline = _deadline(o.connect_timeout)
        where = {"op": "connect", "address": o.address}
        if o.tls and self._ssl is None:
            self._ssl = o.ssl_context()
        try:
            sock = socket.create_connection((o.host, o.port), timeout=o.connect_timeout)
        except TimeoutError:
            raise Timeout(f"no connection within {o.connect_timeout} s", **where) from None
        except OSError as e:
            raise Unavailable(f"cannot connect: {reason(e)}", **where) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(sock, server_hostname=o.server_hostname)
        except TimeoutError:
            sock.close()
            raise Timeout(f"no TLS handshake within {o.connect_timeout} s", **where) from None
        except OSError as e:
            sock.close()
            raise Unavailable(reason(e), **where) from None
        conn = _Connection(sock, o.address)
        if not o.says_hello:
            return conn
        req = p.hello_request(o.client_name, o.auth_secret)
        try:
            frame = self._roundtrip(conn, req, deadline)
            self._server_info = p.decode_response(req, frame, o.address)
        except TimedOut:
            conn.close()
            raise Timeout(f"no hello answer within {o.connect_timeout} s", **where) from None
        except (NotSent, Lost) as e:
            conn.close()
            if conn.close_reason is not None:
                raise conn.close_reason from None
            raise Unavailable(
                f"the connection broke before the hello answer ({e})", **where
            ) from None
        except BaseException:
            conn.close()
            raise
        return conn

    # ---- requests ----

    def _roundtrip(self, conn: _Connection, req: p.Request, deadline: Optional[float]) -> p.Frame:
        rid = self._next_request_id()
        conn.send(req.frame(rid), deadline)
        while True:
            frame = conn.read_frame(deadline)
            if frame.request_id == rid:
                return frame
            # Otherwise the late answer to a request that timed out: dropped.

    def _execute(self, req: p.Request) -> Any:
        retried = False
        while True:
            conn = self._connection()
            self._check_limits(req)
            try:
                frame = self._roundtrip(conn, req, _deadline(self._options.timeout))
            except NotSent as e:
                if retried:
                    raise Unavailable(f"cannot send: {e}", op=req.name, address=self.address)
                retried = True
                continue
            except TimedOut:
                raise Timeout(
                    f"no answer within {self._options.timeout} s", op=req.name, address=self.address
                ) from None
            except Lost as e:
                if req.idempotent and self._options.retry_reads and not retried:
                    retried = True
                    continue
                raise self._lost_error(req, e, retried) from None
            return p.decode_response(req, frame, self.address)

    def _execute_many(self, requests: Sequence[p.Request]) -> List[Any]:
        """Pipelines ``requests``: results (or exceptions) in their order."""
        results: List[Any] = [None] * len(requests)
        todo = list(range(len(requests)))
        retried = False
        while todo:
            conn = self._connection()
            for i in todo:
                try:
                    self._check_limits(requests[i])
                except SegstoreError as e:
                    results[i] = e
            todo = [i for i in todo if results[i] is None]
            unanswered: Dict[int, int] = {}  # request_id -> index
            sent = 0
            in_flight_bytes = 0
            window = self._max_in_flight
            try:
                while sent < len(todo) or unanswered:
                    chunk = []
                    while (
                        sent < len(todo)
                        and len(unanswered) < window
                        and (in_flight_bytes < _PIPELINE_BYTES or not unanswered)
                    ):
                        i = todo[sent]
                        rid = self._next_request_id()
                        data = requests[i].frame(rid)
                        chunk.append(data)
                        unanswered[rid] = i
                        in_flight_bytes += len(data)
                        sent += 1
                    if chunk:
                        try:
                            conn.send(b"".join(chunk), _deadline(self._options.timeout))
                        except NotSent as e:
                            # Part of the chunk may have gone out whole.
                            raise Lost(str(e)) from None
                    frame = conn.read_frame(_deadline(self._options.timeout))
                    i = unanswered.pop(frame.request_id, -1)
                    if i < 0:
                        continue  # a late answer to an earlier request
                    in_flight_bytes -= len(requests[i].body) + p.HEADER_SIZE
                    try:
                        results[i] = p.decode_response(requests[i], frame, self.address)
                    except SegstoreError as e:
                        results[i] = e
                todo = []
            except TimedOut:
                for i in list(unanswered.values()) + todo[sent:]:
                    results[i] = Timeout(
                        f"no answer within {self._options.timeout} s",
                        op=requests[i].name,
                        address=self.address,
                    )
                todo = []
            except Lost as e:
                again = []
                for i in todo[sent:]:
                    again.append(i)  # never sent: safe to send
                for i in unanswered.values():
                    if requests[i].idempotent and self._options.retry_reads and not retried:
                        again.append(i)
                    else:
                        results[i] = self._lost_error(requests[i], e, retried)
                if retried:
                    for i in again:
                        if results[i] is None:
                            results[i] = self._lost_error(requests[i], e, True)
                    again = []
                retried = True
                todo = sorted(again)
        return results

    # ---- operations ----

    def hello(self) -> ServerInfo:
        """Asks the server who it is and its limits (kept as ``server_info``)."""
        o = self._options
        info = self._execute(p.hello_request(o.client_name, o.auth_secret))
        self._server_info = info
        return info

    def ping(self) -> None:
        """A round trip that does nothing."""
        self._execute(p.ping_request())

    def stats(self) -> Dict[str, Union[int, float, str]]:
        """The server's metrics and settings, by dotted name (docs/metrics.md).

        Names are added over time and some appear only when they apply: use
        ``.get()``, not a fixed set of keys.
        """
        return self._execute(p.stats_request())

    def cluster_map(self) -> ClusterMap:
        """The partition map (``cluster=False`` from a single server)."""
        return self._execute(p.cluster_map_request())

    def get(self, user: UserId, options: Optional[GetOptions] = None, **fields: Any) -> GetResult:
        """The user's live segments that match the options.

        ``options`` is a :class:`GetOptions`; keyword arguments name its
        fields and override it: ``get("alice", projection="ids", limit=10)``.
        A user with live segments of which none match gets ``count`` 0.

        For a user linked into a group the answer is the group's merged view
        (``master`` and ``profiles`` set); ``own=True`` reads the user's own
        profile only.

        Raises:
            NotFound: the user has no profile (no live segment; for a linked
                user, no live segment in the whole group).
            InvalidArgument: a bad user ID (empty, too long) or option.
        """
        return self._execute(p.get_request(user, get_options(options, fields)))

    def batch_get(
        self, users: Sequence[UserId], options: Optional[GetOptions] = None, **fields: Any
    ) -> List[Union[GetResult, SegstoreError]]:
        """A get of each user in one request, the same options for all.

        Returns one entry per user in the order asked: a GetResult, or the
        exception of that user alone in its place (NotFound for a user
        without a profile, InvalidArgument for a bad user ID); not raised.

        Raises:
            LimitExceeded: more users than the server's max_batch.
        """
        return self._execute(p.batch_get_request(users, get_options(options, fields)))

    def count(self, user: UserId, id_from: int = 0, id_to: int = MAX_U64) -> CountResult:
        """Live segments of the user with IDs in ``[id_from, id_to]``.

        Raises:
            NotFound: the user has no profile.
        """
        return self._execute(p.count_request(user, id_from, id_to))

    def upsert(
        self,
        user: UserId,
        segments: Iterable[SegmentLike],
        mode: Union[Mode, str] = Mode.SET,
        write_id: Optional[bytes] = None,
        *,
        replace_attrs: bool = False,
    ) -> UpsertResult:
        """Adds or updates segments of one user; expired ones go in the same write.

        ``segments`` are :class:`SegmentUpdate` values (or tuples
        ``(id, value[, ttl[, attr1[, attr2]]])``). ``mode`` is ``"set"``,
        ``"extend"`` or ``"add"`` (:class:`Mode`). ``write_id`` (16 bytes,
        :func:`new_write_id`) names the write for a cluster's at-most-once.
        With ``replace_attrs`` each named segment's attributes become exactly
        those given (None clears one) rather than None keeping the current one.

        Raises:
            InvalidArgument: an expiry not in the future, a TTL of 0, an ID twice...
            LimitExceeded: more segments than the server's max_segments.
            ConnectionLost: the connection broke before the answer; the write
                may or may not have been made (``maybe_applied``).
        """
        return self._execute(p.upsert_request(user, segments, mode, write_id, replace_attrs))

    def batch_upsert(
        self,
        items: Iterable[Union[UpsertItem, Mapping[str, Any]]],
        mode: Union[Mode, str] = Mode.SET,
    ) -> List[Union[UpsertResult, SegstoreError]]:
        """An upsert per item in one request; each item fails alone.

        ``mode`` applies to items without their own. Returns one entry per
        item, in order: an UpsertResult or that item's exception (the item
        wrote nothing; the others are unaffected).
        """
        return self._execute(p.batch_upsert_request(items, mode))

    def remove(
        self, user: UserId, ids: Iterable[int], write_id: Optional[bytes] = None
    ) -> RemoveResult:
        """Removes these segments; ``removed`` says how many the profile held live.

        Raises:
            NotFound: the user has no profile (nothing written).
        """
        return self._execute(p.remove_request(user, ids, write_id))

    def trim(self, user: UserId, before: int = 0, write_id: Optional[bytes] = None) -> TrimResult:
        """Drops every segment not live at ``before``, live ones included.

        ``before`` 0 (or any past time) means now: only expired segments go.
        Never-expiring segments stay.

        Raises:
            NotFound: the user has no profile (nothing written).
        """
        return self._execute(p.trim_request(user, before, write_id))

    def delete(self, user: UserId, write_id: Optional[bytes] = None) -> DeleteResult:
        """Deletes the whole profile, durably; ``deleted`` says whether there was one."""
        return self._execute(p.delete_request(user, write_id))

    def expire(
        self,
        user: UserId,
        ids: Iterable[int],
        value: int,
        ttl: bool = False,
        condition: Union[Condition, str, None] = None,
        write_id: Optional[bytes] = None,
    ) -> ExpireResult:
        """Sets the expiry of these segments where ``condition`` holds.

        ``value`` is Unix seconds (0: never expires), or with ``ttl`` seconds
        from the server's now. ``condition``: ``"nx"`` only segments that
        never expire, ``"xx"`` only those that do, ``"gt"``/``"lt"`` only
        where the new expiry is later/earlier (:class:`Condition`). A new
        expiry not in the future removes the segment. Returns an
        :class:`ExpireOutcome` per ID, in order, and the live count.

        Raises:
            NotFound: the user has no profile (nothing written).
        """
        return self._execute(p.expire_request(user, ids, value, ttl, condition, write_id))

    # ---- profile fields (PROTOCOL.md, "Profile fields") ----

    def field_set(
        self, user: UserId, fields: Iterable[FieldUpdate], write_id: Optional[bytes] = None
    ) -> FieldWriteResult:
        """Sets these fields (:class:`FieldUpdate`), each whole: value, type and
        expiry. ``changed``: the fields set; ``count``: live fields after.

        Raises:
            InvalidArgument: a bad name, a name twice, an expiry not in the future.
            LimitExceeded: a value over the server's max_field_bytes, or more
                than its max_fields live fields.
            Unsupported: a cluster where a node runs a build without fields.
        """
        return self._execute(p.field_set_request(user, fields, write_id))

    def field_del(
        self, user: UserId, names: Iterable[FieldName], write_id: Optional[bytes] = None
    ) -> FieldWriteResult:
        """Deletes these fields; ``changed`` counts the live ones among them.

        Raises:
            NotFound: the user has no profile (nothing written).
        """
        return self._execute(p.field_del_request(user, names, write_id))

    def field_incr(
        self,
        user: UserId,
        name: FieldName,
        delta: int = 1,
        ttl: int = 0,
        window: str = "fixed",
        cap: Optional[int] = None,
        write_id: Optional[bytes] = None,
    ) -> IncrementResult:
        """Adds ``delta`` to a counter (absent or expired: 0), atomically.

        ``ttl`` (seconds, 0: never) is set when the counter is made
        (``window="fixed"``) or by every increment (``"sliding"``). With
        ``cap``, an increment that would pass it writes nothing and answers
        ``capped`` with the current value: "at most 3 a day" is
        ``field_incr(user, "cap:77", ttl=86400, cap=3)``.

        Raises:
            InvalidArgument: the field holds another type, or the sum overflows.
        """
        return self._execute(p.field_incr_request(user, name, delta, ttl, window, cap, write_id))

    def field_max(
        self,
        user: UserId,
        name: FieldName,
        value: FieldValue,
        expiry: int = 0,
        ttl: bool = False,
        write_id: Optional[bytes] = None,
    ) -> FieldMaxResult:
        """Keeps the larger of the field's live value and ``value`` (an int, a
        float or a :class:`Time`), with ``expiry`` when ``value`` is kept.

        Raises:
            InvalidArgument: a str or bytes value, or a field of another type.
        """
        return self._execute(p.field_max_request(user, name, value, expiry, ttl, write_id))

    # ---- profile bridging (PROTOCOL.md, "Linked profiles") ----

    def link(
        self, user: UserId, master: UserId, ttl: int = 0, write_id: Optional[bytes] = None
    ) -> LinkResult:
        """Links ``user`` into the group of ``master``: a get of any of them
        then answers the group's merged view.

        Groups are stars: when ``master`` is itself a member, ``user`` joins
        its master's group; when ``user`` is a master, its whole group moves
        with it (``moved``). The link lasts ``ttl`` seconds (0: never);
        linking again refreshes it. Profiles are not touched.

        Raises:
            InvalidArgument: ``user == master``, or a bad user ID.
            LimitExceeded: the group would have more members than the
                server's ``max_links`` (nothing written).
            Unsupported: a cluster with a node whose build has no links.
            ConnectionLost: the connection broke before the answer; the link
                may or may not have been made (``maybe_applied``).
        """
        return self._execute(p.link_request(user, master, ttl, write_id))

    def unlink(self, user: UserId, write_id: Optional[bytes] = None) -> bool:
        """Takes ``user`` out of its group; whether it was linked.

        A master's unlink dissolves its whole group. Profiles are not touched.
        """
        return self._execute(p.unlink_request(user, write_id))

    def master_of(self, user: UserId) -> UserId:
        """The master of the user's group (``user`` itself for a master).

        Raises:
            NotFound: the user is in no group (as :meth:`get` raises it for
                a user without a profile).
        """
        return self._execute(p.master_of_request(user))

    def links(self, user: UserId, cursor: Optional[UserId] = None, limit: int = 0) -> LinksPage:
        """One page of the members of the user's group, sorted by user ID.

        ``cursor`` is the previous page's ``next`` (None: the first page);
        ``limit`` caps the page (0: the server's 100). :meth:`iter_links`
        walks every page.

        Raises:
            NotFound: the user is in no group.
        """
        return self._execute(p.links_request(user, cursor, limit))

    def iter_links(self, user: UserId, limit: int = 0) -> Iterator[LinkedUser]:
        """Every member of the user's group, a page (of ``limit``) at a time.

        Each page is a request of its own: a group that changes meanwhile
        may be seen partly before, partly after the change.

        Raises:
            NotFound: the user is in no group (when the first page is read).
        """
        cursor: Optional[UserId] = None
        while True:
            page = self.links(user, cursor, limit)
            yield from page.links
            if page.next is None:
                return
            cursor = page.next

    def are_connected(self, a: UserId, b: UserId) -> bool:
        """Whether ``a`` and ``b`` are in one group (or are the same user).

        The protocol's ``connected`` operation (the name ``connected`` is
        this client's connection state).
        """
        return self._execute(p.connected_request(a, b))

    def scan(self, partition: int, cursor: int = 0, max_bytes: int = 0) -> ScanPage:
        """One page of a partition's profiles (PROTOCOL.md, "scan"): start at
        cursor 0 and send each page's ``cursor`` back until ``finished``."""
        return self._execute(p.scan_request(partition, cursor, max_bytes))

    def copy_partition(
        self, partition: int, cursor: int = 0, min_next: int = 0, max_bytes: int = 0
    ) -> CopyPartitionResult:
        """Node to node: one page of a partition's records (clients have no need of it)."""
        return self._execute(p.copy_partition_request(partition, cursor, min_next, max_bytes))

    def link_step(
        self,
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
    ) -> LinkStepResult:
        """Node to node: one single-record step of a link, unlink or grouped
        delete, on a node holding ``user`` (clients have no need of it).

        ``kind`` is a :class:`StepKind` (``"list"``, ``"name"``...); the
        other fields are link_step's in PROTOCOL.md (``moving``: LinkedUser
        or ``(user, expires_at)`` pairs), left out when empty, 0 or false.

        Raises:
            InvalidArgument: an unknown ``kind`` (not sent); a kind without
                the user it needs; a single server (node to node only).
            LimitExceeded: past ``max_links`` (nothing written); ``moving``
                or ``listed`` longer than the server's max_batch (not sent).
            ConnectionLost: the connection broke before the answer; the
                step may or may not have been made (``maybe_applied``).
        """
        return self._execute(
            p.link_step_request(
                user,
                kind,
                master=master,
                member=member,
                expect=expect,
                expires=expires,
                moving=moving,
                listed=listed,
                stale=stale,
                members_too=members_too,
                max_links=max_links,
                write_id=write_id,
            )
        )

    def read_records(self, users: Sequence[UserId]) -> List[Union[StoredRecord, SegstoreError]]:
        """Node to node: the records of ``users`` as stored, in one request.

        Returns one entry per user in the order asked: a StoredRecord, or
        the exception of that user alone in its place (NotFound for a user
        without a record, WrongNode for one the node does not serve); not
        raised.

        Raises:
            InvalidArgument: no users (not sent); a single server.
            LimitExceeded: more users than the server's max_batch.
        """
        return self._execute(p.read_records_request(users))

    def call(
        self,
        op: int,
        body: Union[bytes, Mapping[str, Any], None] = None,
        *,
        idempotent: bool = False,
    ) -> Any:
        """Any operation by its code; returns the answer's decoded body.

        ``body`` is a mapping (packed as MessagePack) or bytes sent as they
        are. ``idempotent`` lets a lost connection retry it once.
        """
        return self._execute(p.raw_request(op, body, idempotent=idempotent))

    def pipeline(self) -> "Pipeline":
        """A :class:`Pipeline` of requests to send together."""
        return Pipeline(self)


class Pipeline:
    """Requests queued on a sync client and sent together, answers read after.

    Each queued call returns the pipeline, so calls chain; :meth:`execute`
    sends them (up to the server's ``max_in_flight`` unanswered at a time),
    waits for every answer, and returns the results in the order queued::

        results = client.pipeline().get("alice").get("bob").count("carol").execute()

    ``timeout`` then bounds the wait for each next answer. When the
    connection breaks, reads not yet answered are sent once more on a fresh
    connection; writes not answered get ConnectionLost.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._requests: List[p.Request] = []

    def __len__(self) -> int:
        return len(self._requests)

    def _add(self, req: p.Request) -> "Pipeline":
        self._requests.append(req)
        return self

    def execute(self, raise_on_error: bool = True) -> List[Any]:
        """Sends the queued requests and returns their results in order.

        With ``raise_on_error`` the first failed request's exception is
        raised (after every answer came); without it, exceptions take their
        request's place in the list. The pipeline is empty afterwards.
        """
        requests, self._requests = self._requests, []
        results = self._client._execute_many(requests)
        if raise_on_error:
            for r in results:
                if isinstance(r, SegstoreError):
                    raise r
        return results

    def ping(self) -> "Pipeline":
        return self._add(p.ping_request())

    def stats(self) -> "Pipeline":
        return self._add(p.stats_request())

    def get(self, user: UserId, options: Optional[GetOptions] = None, **fields: Any) -> "Pipeline":
        return self._add(p.get_request(user, get_options(options, fields)))

    def batch_get(
        self, users: Sequence[UserId], options: Optional[GetOptions] = None, **fields: Any
    ) -> "Pipeline":
        return self._add(p.batch_get_request(users, get_options(options, fields)))

    def count(self, user: UserId, id_from: int = 0, id_to: int = MAX_U64) -> "Pipeline":
        return self._add(p.count_request(user, id_from, id_to))

    def upsert(
        self,
        user: UserId,
        segments: Iterable[SegmentLike],
        mode: Union[Mode, str] = Mode.SET,
        write_id: Optional[bytes] = None,
        *,
        replace_attrs: bool = False,
    ) -> "Pipeline":
        return self._add(p.upsert_request(user, segments, mode, write_id, replace_attrs))

    def batch_upsert(
        self,
        items: Iterable[Union[UpsertItem, Mapping[str, Any]]],
        mode: Union[Mode, str] = Mode.SET,
    ) -> "Pipeline":
        return self._add(p.batch_upsert_request(items, mode))

    def remove(
        self, user: UserId, ids: Iterable[int], write_id: Optional[bytes] = None
    ) -> "Pipeline":
        return self._add(p.remove_request(user, ids, write_id))

    def trim(self, user: UserId, before: int = 0, write_id: Optional[bytes] = None) -> "Pipeline":
        return self._add(p.trim_request(user, before, write_id))

    def delete(self, user: UserId, write_id: Optional[bytes] = None) -> "Pipeline":
        return self._add(p.delete_request(user, write_id))

    def expire(
        self,
        user: UserId,
        ids: Iterable[int],
        value: int,
        ttl: bool = False,
        condition: Union[Condition, str, None] = None,
        write_id: Optional[bytes] = None,
    ) -> "Pipeline":
        return self._add(p.expire_request(user, ids, value, ttl, condition, write_id))

    def link(
        self, user: UserId, master: UserId, ttl: int = 0, write_id: Optional[bytes] = None
    ) -> "Pipeline":
        return self._add(p.link_request(user, master, ttl, write_id))

    def unlink(self, user: UserId, write_id: Optional[bytes] = None) -> "Pipeline":
        return self._add(p.unlink_request(user, write_id))

    def master_of(self, user: UserId) -> "Pipeline":
        return self._add(p.master_of_request(user))

    def links(
        self, user: UserId, cursor: Optional[UserId] = None, limit: int = 0
    ) -> "Pipeline":
        return self._add(p.links_request(user, cursor, limit))

    def are_connected(self, a: UserId, b: UserId) -> "Pipeline":
        return self._add(p.connected_request(a, b))
