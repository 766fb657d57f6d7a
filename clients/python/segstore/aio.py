"""The asyncio client: one connection, many requests in flight.

Every call writes its request at once and waits for the answer with that
request's ID, so concurrent calls share the connection (pipelining)::

    async with AsyncClient("127.0.0.1", 7700) as c:
        results = await asyncio.gather(*(c.get(u) for u in users))

Answers may come back in any order; each finds its caller. Requests written
in one turn of the event loop leave in one write. At most the server's
``max_in_flight`` requests are in flight; more wait their turn here. A lost
connection fails the requests in flight: reads are sent once more on a
fresh connection, writes raise ConnectionLost (``maybe_applied``). The next
call reconnects.

An AsyncClient is safe for any number of tasks of one event loop. Its
connection belongs to the loop that opened it: used from another loop (a
second ``asyncio.run``), the client opens a new one there.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from typing import (
    Any,
    AsyncIterator,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import protocol as p
from ._base import ClientBase, Closed, Lost, NotSent, TimedOut, get_options, reason
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


class _Connection(asyncio.Protocol):
    """The connection's protocol object: writes frames, routes answers by ID."""

    def __init__(self, address: str, loop: asyncio.AbstractEventLoop) -> None:
        self.address = address
        self.loop = loop
        self.transport: Optional[asyncio.Transport] = None
        self.closed = False
        self.close_reason: Optional[SegstoreError] = None
        self.lost_reason = ""
        self.slots = asyncio.Semaphore(p.DEFAULT_MAX_IN_FLIGHT)
        self._reader = p.FrameReader()
        self._pending: Dict[int, asyncio.Future] = {}
        self._out: List[bytes] = []
        self._paused = False
        self._drained: Optional[asyncio.Future] = None
        self._lost: asyncio.Future = loop.create_future()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._reader.feed(data)
        except ProtocolError as e:
            self._fail(e)
            if self.transport is not None:
                self.transport.abort()
            return
        for f in frames:
            if f.request_id == 0 and f.status != 0:
                self.close_reason = p.error_of(f, self.address)
                continue
            fut = self._pending.pop(f.request_id, None)
            if fut is not None and not fut.done():
                fut.set_result(f)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Optional[Exception]) -> None:
        why = reason(exc) if exc is not None else "the server closed it"
        self.lost_reason = why
        self._fail(Lost(why, self.close_reason))
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # for the client

    def _fail(self, exc: BaseException) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(exc)

    def send(self, request_id: int, data: bytes) -> asyncio.Future:
        """Queues a frame for this turn's write; the future gets its answer."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise NotSent(self.lost_reason or "the connection is closed")
        fut = self.loop.create_future()
        self._pending[request_id] = fut
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.append(data)
        return fut

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and not self.closed and self.transport is not None:
            self.transport.write(b"".join(out))

    async def drain(self) -> None:
        """Waits while the transport's write buffer is over its high-water mark.

        NotSent when the connection ends meanwhile.
        """
        if self._paused and not self.closed:
            if self._drained is None:
                self._drained = self.loop.create_future()
            try:
                await asyncio.shield(self._drained)
            except Lost as e:
                raise NotSent(e.reason) from None

    def forget(self, request_id: int) -> None:
        self._pending.pop(request_id, None)

    def in_use(self, request_id: int) -> bool:
        return request_id in self._pending

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def close(self) -> None:
        """Fails what waits with Closed, closes, and waits briefly for the end."""
        self._fail(Closed("closed by the client"))
        if self.transport is not None:
            self.transport.close()
            try:
                await asyncio.wait_for(asyncio.shield(self._lost), 2.0)
            except asyncio.TimeoutError:
                self.transport.abort()


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(TimedOut())


class AsyncClient(ClientBase):
    """An asyncio segstore client over one connection; see the module's text.

    Takes the same arguments as :class:`segstore.Client`. Connect with
    ``async with AsyncClient(...) as c`` or ``await c.connect()``, or let
    the first call connect; close with ``await c.close()``.
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
        self._connecting: Optional[asyncio.Lock] = None
        self._ssl: Optional[ssl.SSLContext] = None

    @classmethod
    def from_address(cls, address: str, **kwargs: Any) -> "AsyncClient":
        """A client of ``"host:port"``; kwargs as the constructor's."""
        host, port = parse_address(address)
        return cls(host, port, **kwargs)

    # ---- connection ----

    @property
    def connected(self) -> bool:
        """Whether a connection is open."""
        return self._conn is not None and not self._conn.closed

    @property
    def in_flight(self) -> int:
        """Requests written whose answer has not come yet."""
        return self._conn.in_flight if self._conn is not None else 0

    async def connect(self) -> "AsyncClient":
        """Opens the connection now (calls open it when needed); returns the client."""
        await self._connection()
        return self

    async def close(self) -> None:
        """Closes the connection; requests in flight raise ConnectionLost.

        A later call opens a new connection.
        """
        conn, self._conn = self._conn, None
        if conn is None or conn.loop.is_closed():
            return
        if conn.loop is asyncio.get_running_loop():
            await conn.close()
        elif conn.transport is not None:
            conn.transport.abort()  # another loop's: ended when that loop runs again

    async def __aenter__(self) -> "AsyncClient":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        return f"<segstore.aio.AsyncClient {self.address} {state}>"

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            if conn.loop is asyncio.get_running_loop():
                return conn
            # A connection of an event loop that is gone (another asyncio.run):
            # its transport cannot be used from here; open a new one.
            self._conn = conn = None
            self._connecting = None
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            conn = self._conn
            if conn is None or conn.closed:
                self._conn = None
                conn = await self._open()
                self._conn = conn
            return conn

    async def _open(self) -> _Connection:
        o = self._options
        loop = asyncio.get_running_loop()
        where = {"op": "connect", "address": o.address}
        if o.tls and self._ssl is None:
            self._ssl = o.ssl_context()
        start = loop.time()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(o.address, loop),
                    o.host,
                    o.port,
                    ssl=self._ssl,
                    server_hostname=o.server_hostname if self._ssl is not None else None,
                ),
                o.connect_timeout,
            )
        except asyncio.TimeoutError:
            raise Timeout(f"no connection within {o.connect_timeout} s", **where) from None
        except OSError as e:
            raise Unavailable(f"cannot connect: {reason(e)}", **where) from None
        if not o.says_hello:
            return conn
        req = p.hello_request(o.client_name, o.auth_secret)
        left = None if o.connect_timeout is None else o.connect_timeout - (loop.time() - start)
        try:
            if left is not None and left <= 0:
                raise TimedOut()
            frame = await self._roundtrip(conn, req, left)
            self._server_info = info = p.decode_response(req, frame, o.address)
        except TimedOut:
            await conn.close()
            raise Timeout(f"no hello answer within {o.connect_timeout} s", **where) from None
        except (NotSent, Lost) as e:
            await conn.close()
            if conn.close_reason is not None:
                raise conn.close_reason from None
            raise Unavailable(
                f"the connection broke before the hello answer ({e})", **where
            ) from None
        except BaseException:
            await conn.close()
            raise
        if info.max_in_flight:
            conn.slots = asyncio.Semaphore(info.max_in_flight)
        return conn

    # ---- requests ----

    def _free_request_id(self, conn: _Connection) -> int:
        while True:
            rid = self._next_request_id()
            if not conn.in_use(rid):
                return rid

    async def _roundtrip(
        self, conn: _Connection, req: p.Request, timeout: Optional[float]
    ) -> p.Frame:
        async with conn.slots:
            await conn.drain()
            rid = self._free_request_id(conn)
            fut = conn.send(rid, req.frame(rid))
            timer = None if timeout is None else conn.loop.call_later(timeout, _expire, fut)
            try:
                return await fut
            finally:
                if timer is not None:
                    timer.cancel()
                conn.forget(rid)

    async def _execute(self, req: p.Request) -> Any:
        retried = False
        while True:
            conn = await self._connection()
            self._check_limits(req)
            try:
                frame = await self._roundtrip(conn, req, self._options.timeout)
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
                if (
                    req.idempotent
                    and self._options.retry_reads
                    and not retried
                    and not isinstance(e, Closed)
                ):
                    retried = True
                    continue
                raise self._lost_error(req, e, retried) from None
            return p.decode_response(req, frame, self.address)

    # ---- operations: as segstore.Client's ----

    async def hello(self) -> ServerInfo:
        """Asks the server who it is and its limits (kept as ``server_info``)."""
        o = self._options
        info = await self._execute(p.hello_request(o.client_name, o.auth_secret))
        self._server_info = info
        return info

    async def ping(self) -> None:
        """A round trip that does nothing."""
        await self._execute(p.ping_request())

    async def stats(self) -> Dict[str, Union[int, float, str]]:
        """The server's metrics and settings, by dotted name (names come and go)."""
        return await self._execute(p.stats_request())

    async def cluster_map(self) -> ClusterMap:
        """The partition map (``cluster=False`` from a single server)."""
        return await self._execute(p.cluster_map_request())

    async def get(
        self, user: UserId, options: Optional[GetOptions] = None, **fields: Any
    ) -> GetResult:
        """The user's live segments matching the options (keyword arguments
        override ``options``' fields); a linked user's group's merged view
        unless ``own=True``. Raises NotFound for a user without a profile."""
        return await self._execute(p.get_request(user, get_options(options, fields)))

    async def batch_get(
        self, users: Sequence[UserId], options: Optional[GetOptions] = None, **fields: Any
    ) -> List[Union[GetResult, SegstoreError]]:
        """A get of each user in one request: per user a GetResult or that
        user's exception, in place (not raised)."""
        return await self._execute(p.batch_get_request(users, get_options(options, fields)))

    async def count(self, user: UserId, id_from: int = 0, id_to: int = MAX_U64) -> CountResult:
        """Live segments of the user with IDs in ``[id_from, id_to]``; NotFound
        without a profile."""
        return await self._execute(p.count_request(user, id_from, id_to))

    async def upsert(
        self,
        user: UserId,
        segments: Iterable[SegmentLike],
        mode: Union[Mode, str] = Mode.SET,
        write_id: Optional[bytes] = None,
        *,
        replace_attrs: bool = False,
    ) -> UpsertResult:
        """Adds or updates segments of one user (see :meth:`segstore.Client.upsert`)."""
        return await self._execute(
            p.upsert_request(user, segments, mode, write_id, replace_attrs)
        )

    async def batch_upsert(
        self,
        items: Iterable[Union[UpsertItem, Mapping[str, Any]]],
        mode: Union[Mode, str] = Mode.SET,
    ) -> List[Union[UpsertResult, SegstoreError]]:
        """An upsert per item in one request: per item an UpsertResult or that
        item's exception, in place (not raised)."""
        return await self._execute(p.batch_upsert_request(items, mode))

    async def remove(
        self, user: UserId, ids: Iterable[int], write_id: Optional[bytes] = None
    ) -> RemoveResult:
        """Removes these segments; NotFound without a profile."""
        return await self._execute(p.remove_request(user, ids, write_id))

    async def trim(
        self, user: UserId, before: int = 0, write_id: Optional[bytes] = None
    ) -> TrimResult:
        """Drops every segment not live at ``before`` (0: now); NotFound without a profile."""
        return await self._execute(p.trim_request(user, before, write_id))

    async def delete(self, user: UserId, write_id: Optional[bytes] = None) -> DeleteResult:
        """Deletes the whole profile, durably."""
        return await self._execute(p.delete_request(user, write_id))

    async def expire(
        self,
        user: UserId,
        ids: Iterable[int],
        value: int,
        ttl: bool = False,
        condition: Union[Condition, str, None] = None,
        write_id: Optional[bytes] = None,
    ) -> ExpireResult:
        """Sets these segments' expiry where ``condition`` holds (see
        :meth:`segstore.Client.expire`); NotFound without a profile."""
        return await self._execute(p.expire_request(user, ids, value, ttl, condition, write_id))

    async def field_set(
        self, user: UserId, fields: Iterable[FieldUpdate], write_id: Optional[bytes] = None
    ) -> FieldWriteResult:
        """Sets these fields, each whole (see :meth:`segstore.Client.field_set`)."""
        return await self._execute(p.field_set_request(user, fields, write_id))

    async def field_del(
        self, user: UserId, names: Iterable[FieldName], write_id: Optional[bytes] = None
    ) -> FieldWriteResult:
        """Deletes these fields; NotFound without a profile."""
        return await self._execute(p.field_del_request(user, names, write_id))

    async def field_incr(
        self,
        user: UserId,
        name: FieldName,
        delta: int = 1,
        ttl: int = 0,
        window: str = "fixed",
        cap: Optional[int] = None,
        write_id: Optional[bytes] = None,
    ) -> IncrementResult:
        """Adds to a counter, refusing to pass ``cap`` (see
        :meth:`segstore.Client.field_incr`)."""
        return await self._execute(
            p.field_incr_request(user, name, delta, ttl, window, cap, write_id)
        )

    async def field_max(
        self,
        user: UserId,
        name: FieldName,
        value: FieldValue,
        expiry: int = 0,
        ttl: bool = False,
        write_id: Optional[bytes] = None,
    ) -> FieldMaxResult:
        """Keeps the larger value (see :meth:`segstore.Client.field_max`)."""
        return await self._execute(p.field_max_request(user, name, value, expiry, ttl, write_id))

    async def link(
        self, user: UserId, master: UserId, ttl: int = 0, write_id: Optional[bytes] = None
    ) -> LinkResult:
        """Links ``user`` into the group of ``master`` (see :meth:`segstore.Client.link`);
        InvalidArgument for ``user == master``, LimitExceeded past ``max_links``."""
        return await self._execute(p.link_request(user, master, ttl, write_id))

    async def unlink(self, user: UserId, write_id: Optional[bytes] = None) -> bool:
        """Takes ``user`` out of its group; whether it was linked."""
        return await self._execute(p.unlink_request(user, write_id))

    async def master_of(self, user: UserId) -> UserId:
        """The master of the user's group; NotFound when it is in no group."""
        return await self._execute(p.master_of_request(user))

    async def links(
        self, user: UserId, cursor: Optional[UserId] = None, limit: int = 0
    ) -> LinksPage:
        """One page of the members of the user's group (see
        :meth:`segstore.Client.links`); NotFound when it is in no group."""
        return await self._execute(p.links_request(user, cursor, limit))

    async def iter_links(self, user: UserId, limit: int = 0) -> AsyncIterator[LinkedUser]:
        """Every member of the user's group, a page at a time::

            async for link in c.iter_links("alice"):
                print(link.user, link.expires_at)
        """
        cursor: Optional[UserId] = None
        while True:
            page = await self.links(user, cursor, limit)
            for link in page.links:
                yield link
            if page.next is None:
                return
            cursor = page.next

    async def are_connected(self, a: UserId, b: UserId) -> bool:
        """Whether ``a`` and ``b`` are in one group (or are the same user):
        the protocol's ``connected``."""
        return await self._execute(p.connected_request(a, b))

    async def scan(self, partition: int, cursor: int = 0, max_bytes: int = 0) -> ScanPage:
        """One page of a partition's profiles (PROTOCOL.md, "scan")."""
        return await self._execute(p.scan_request(partition, cursor, max_bytes))

    async def copy_partition(
        self, partition: int, cursor: int = 0, min_next: int = 0, max_bytes: int = 0
    ) -> CopyPartitionResult:
        """Node to node: one page of a partition's records."""
        return await self._execute(
            p.copy_partition_request(partition, cursor, min_next, max_bytes)
        )

    async def link_step(
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
        """Node to node: one single-record step of a link (see
        :meth:`segstore.Client.link_step`)."""
        return await self._execute(
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

    async def read_records(
        self, users: Sequence[UserId]
    ) -> List[Union[StoredRecord, SegstoreError]]:
        """Node to node: the records of ``users`` as stored: per user a
        StoredRecord or that user's exception, in place (not raised)."""
        return await self._execute(p.read_records_request(users))

    async def call(
        self,
        op: int,
        body: Union[bytes, Mapping[str, Any], None] = None,
        *,
        idempotent: bool = False,
    ) -> Any:
        """Any operation by its code; returns the answer's decoded body."""
        return await self._execute(p.raw_request(op, body, idempotent=idempotent))
