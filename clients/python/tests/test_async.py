"""The asyncio client: every operation, and many requests in flight on one
connection, against a real segstored (and a fake server where the order of
answers must be chosen)."""

from __future__ import annotations

import asyncio
import random
import socket
import time

import pytest

import segstore
from segstore import (
    ConnectionLost,
    CountResult,
    DeleteResult,
    GetResult,
    InvalidArgument,
    LimitExceeded,
    LinkedUser,
    LinkResult,
    LinksPage,
    NotFound,
    Op,
    RemoveResult,
    SegmentUpdate as S,
    TrimResult,
    UpsertItem,
    UpsertResult,
)
from segstore import protocol as p


def run(coro):
    return asyncio.run(coro)


async def until_in_flight(c: segstore.AsyncClient, task: asyncio.Future) -> None:
    """Waits until ``c`` has a request in flight (``task`` must not end first)."""
    deadline = time.monotonic() + 30
    while c.in_flight == 0:
        assert not task.done(), task.exception()
        assert time.monotonic() < deadline, "the request was never sent"
        await asyncio.sleep(0.001)


def test_every_operation(server, user):
    async def body():
        async with server.async_client() as c:
            assert c.connected and c.server_info.max_batch == 20
            assert (await c.hello()).max_segments == 50
            assert await c.ping() is None
            assert "server.version" in await c.stats()
            assert (await c.cluster_map()).cluster is False
            now = int(time.time())
            segments = [S.expiring_at(1, now + 3600, attr1=4), S.forever(2), (3, 60, True)]
            r = await c.upsert(user, segments)
            assert r == UpsertResult(3, 0, 0, 3)
            g = await c.get(user)
            assert g.ids == [1, 2, 3] and g.expires[:2] == [now + 3600, 0]
            assert g.attr1 == [4, None, None]
            assert (await c.get(user, projection="ids", id_from=2, limit=1)) == GetResult(2, [2])
            assert await c.count(user, id_to=2) == CountResult(2)
            results = await c.batch_get([user, user + "-none", ""], count_only=True)
            assert results[0] == GetResult(3, [])
            assert isinstance(results[1], NotFound) and isinstance(results[2], InvalidArgument)
            # Adding 0 seconds is invalid; the other item is written.
            items = [UpsertItem(user, [S(2, 10)]), UpsertItem(user, [S(9, 0)])]
            results = await c.batch_upsert(items, mode="add")
            assert results[0] == UpsertResult(0, 1, 0, 3)
            assert isinstance(results[1], InvalidArgument)
            assert (await c.get(user)).expires[1] == 0  # never, plus 10 s, is never
            assert await c.remove(user, [3, 3, 99]) == RemoveResult(1)
            assert await c.trim(user, before=now + 7200) == TrimResult(1, 1)
            try:  # segment 2 never expires: nx holds
                r = await c.expire(user, [2], now + 60, condition="nx")
                assert r.results == [segstore.ExpireOutcome.SET] and r.count == 1
            except segstore.Unsupported:
                pass  # a segstored without expire (0x25) yet
            assert await c.delete(user) == DeleteResult(True)
            assert await c.delete(user) == DeleteResult(False)
            with pytest.raises(NotFound) as e:
                await c.get(user)
            assert e.value.op == "get" and e.value.message
            with pytest.raises(InvalidArgument):
                await c.copy_partition(0)
            with pytest.raises(InvalidArgument):
                await c.link_step(user, "delete")
            with pytest.raises(InvalidArgument):
                await c.read_records([user])
            with pytest.raises(segstore.Unsupported):
                await c.call(0x7F)
            with pytest.raises(NotFound):
                await c.call(Op.COUNT, {"user": user + "-none"}, idempotent=True)
        assert not c.connected

    run(body())


def test_many_requests_in_flight_on_one_connection(server, user):
    """Thousands of gets at once: each answer reaches its own caller, the
    in-flight count stays within the server's max_in_flight, and it climbs
    well above one (the requests really were pipelined)."""
    users = [f"{user}-{i}" for i in range(100)]

    async def body():
        async with server.async_client() as c:
            for start in range(0, len(users), 20):
                chunk = enumerate(users[start : start + 20], start)
                items = [UpsertItem(u, [S.forever(i)]) for i, u in chunk]
                assert all(isinstance(r, UpsertResult) for r in await c.batch_upsert(items))
            rnd = random.Random(7)
            picks = [rnd.randrange(len(users)) for _ in range(3000)]
            tasks = [asyncio.ensure_future(c.get(users[i], projection="ids")) for i in picks]
            most = 0
            while not all(t.done() for t in tasks):
                most = max(most, c.in_flight)
                await asyncio.sleep(0)
            results = [t.result() for t in tasks]
            assert [r.ids for r in results] == [[i] for i in picks]
            assert 1 < most <= c.server_info.max_in_flight
            assert c.in_flight == 0

    run(body())


def test_concurrent_writes_and_reads(server, user):
    async def body():
        async with server.async_client() as c:

            async def writer(n: int) -> None:
                for k in range(10):
                    await c.upsert(user, [S.forever(n * 100 + k)])

            await asyncio.gather(*(writer(n) for n in range(5)))
            g = await c.get(user, projection="ids")
            assert g.count == 50  # concurrent upserts of one user never lose a segment
            outcomes = await asyncio.gather(
                c.get(user, limit=1), c.get(user + "-none"), c.count(user), return_exceptions=True
            )
            assert outcomes[0].count == 50 and isinstance(outcomes[1], NotFound)
            assert outcomes[2].count == 50

    run(body())


def test_client_side_limits(server, user):
    async def body():
        async with server.async_client() as c:
            with pytest.raises(LimitExceeded) as e:
                await c.batch_get([user] * 21)
            assert "not sent" in e.value.message
            with pytest.raises(LimitExceeded):
                await c.upsert(user, [S.forever(i, i, i) for i in range(8000)])
            await c.ping()

    run(body())


def _answer(frame: bytes, body: dict) -> bytes:
    """A get answer to the request ``frame`` with ``body``."""
    rid = int.from_bytes(frame[8:12], "big")
    return p.Frame(frame[3], 0, 0, rid, p.pack(body)).encode()


def test_answers_out_of_order_find_their_callers(fake_server):
    """Three gets; the server answers them in reverse order."""

    def serve(conn: socket.socket, index: int) -> None:
        frames = [server.read_frame(conn) for _ in range(3)]
        for f in reversed(frames):
            user = p.unpack_body(p.decode_frame(f))["user"]
            conn.sendall(_answer(f, {"count": 1, "ids": [int(user)]}))
        server.read_frame(conn)  # until the client goes

    server = fake_server(serve)

    async def body():
        async with segstore.AsyncClient("127.0.0.1", server.port, hello=False, timeout=30) as c:
            results = await asyncio.gather(c.get("1"), c.get("2"), c.get("3"))
            assert [r.ids for r in results] == [[1], [2], [3]]

    run(body())


def test_a_cancelled_request_leaves_the_connection_usable(fake_server):
    """The first get is never answered until the second arrives; the first is
    cancelled meanwhile, its late answer is dropped, the second gets its own."""

    def serve(conn: socket.socket, index: int) -> None:
        first = server.read_frame(conn)
        second = server.read_frame(conn)
        conn.sendall(_answer(first, {"count": 1, "ids": [1]}))
        conn.sendall(_answer(second, {"count": 1, "ids": [2]}))
        server.read_frame(conn)

    server = fake_server(serve)

    async def body():
        async with segstore.AsyncClient("127.0.0.1", server.port, hello=False, timeout=30) as c:
            first = asyncio.ensure_future(c.get("a"))
            await until_in_flight(c, first)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            assert (await c.get("b")).ids == [2]
            assert server.connections == 1

    run(body())


def test_close_fails_the_requests_in_flight(fake_server):
    def serve(conn: socket.socket, index: int) -> None:
        server.read_frame(conn)
        server.read_frame(conn)  # never answers; returns when the client closes

    server = fake_server(serve)

    async def body():
        c = segstore.AsyncClient("127.0.0.1", server.port, hello=False, timeout=30)
        pending = asyncio.ensure_future(c.get("a"))
        await until_in_flight(c, pending)
        await c.close()
        with pytest.raises(ConnectionLost) as e:
            await pending
        assert "closed" in e.value.message and not e.value.maybe_applied
        assert not c.connected  # not sent again on a new connection
        assert len(server.frames) <= 1

    run(body())


def test_one_client_across_event_loops(server, user):
    c = server.async_client()
    run(c.upsert(user, [S.forever(1)]))
    assert run(c.get(user)).ids == [1]  # a second asyncio.run: a new connection
    run(c.close())


def test_profile_bridging(server, user):
    """link, unlink, master_of, links, iter_links, are_connected and the
    merged get, with calls in flight together (the shared server's
    max_links is 4)."""
    master = user + "-m"
    members = [f"{user}-{i}" for i in range(4)]

    async def body():
        async with server.async_client() as c:
            await c.upsert(master, [S.forever(1)])
            await c.upsert(members[0], [S.forever(2, attr1=9)])
            # Links into one group in flight together: none is lost.
            results = await asyncio.gather(*(c.link(m, master) for m in members))
            assert all(isinstance(r, LinkResult) and r.master == master for r in results)
            # Each answer counts the members when its link was done ("now").
            counts = [r.members for r in results]
            assert all(1 <= n <= 4 for n in counts) and max(counts) == 4
            with pytest.raises(LimitExceeded) as e:
                await c.link(user + "-more", master)
            assert e.value.op == "link"
            with pytest.raises(InvalidArgument):
                await c.link(master, master)

            g, own, masters, connected = await asyncio.gather(
                c.get(members[1], projection="ids"),
                c.get(members[0], own=True),
                asyncio.gather(*(c.master_of(m) for m in members)),
                c.are_connected(members[0], members[3]),
            )
            assert g == GetResult(2, [1, 2], master=master, profiles=5) and g.merged
            assert own.ids == [2] and own.attr1 == [9] and own.master is None
            assert masters == [master] * 4 and connected is True
            assert await c.are_connected(master, user + "-none") is False
            with pytest.raises(NotFound) as e:
                await c.master_of(user + "-none")
            assert e.value.message == "the user is in no group"

            page = await c.links(members[2], limit=3)
            assert isinstance(page, LinksPage) and page.master == master
            assert page.users == members[:3] and page.more
            last = await c.links(master, cursor=page.next)
            assert last.links == [LinkedUser(members[3], 0)] and not last.more
            assert [l.user async for l in c.iter_links(master, limit=2)] == members
            batch = await c.batch_get([members[3], master], projection="ids", own=True)
            assert isinstance(batch[0], NotFound) and batch[1] == GetResult(1, [1])

            assert await c.unlink(members[3]) is True
            assert await c.unlink(members[3]) is False
            assert await c.unlink(master) is True  # dissolves the group
            with pytest.raises(NotFound):
                await c.links(members[0])
            with pytest.raises(NotFound):
                await c.get(members[1])  # no profile of its own, no group any more
            assert await c.get(members[0], projection="ids") == GetResult(1, [2])

    run(body())
