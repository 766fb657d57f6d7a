"""Timeouts, lost connections, reconnects and the statuses a single server
gives when pushed (Busy, DeviceFull, Unsupported), for both clients.

Nothing here waits a fixed time for something to happen: a server that must
not answer is one that never does, and a restart is awaited through the
daemon's readiness notification.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time

import pytest

import segstore
from segstore import (
    Busy,
    ConnectionLost,
    GetResult,
    SegmentUpdate as S,
    Timeout,
    Unavailable,
)
from segstore import protocol as p

SHORT = 0.3  # a timeout that must pass: nothing ever answers within it


@pytest.fixture
def silent_listener():
    """A listening socket that never accepts: connects succeed, nothing answers."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


def test_request_timeout(silent_listener):
    c = segstore.Client("127.0.0.1", silent_listener, hello=False, timeout=SHORT)
    start = time.monotonic()
    with pytest.raises(Timeout) as e:
        c.get("alice")
    assert time.monotonic() - start >= SHORT
    assert e.value.status is segstore.Status.Timeout and e.value.op == "get"
    assert isinstance(e.value, TimeoutError)
    c.close()


def test_connect_timeout_covers_the_hello(silent_listener):
    c = segstore.Client("127.0.0.1", silent_listener, connect_timeout=SHORT)
    with pytest.raises(Timeout) as e:
        c.connect()
    assert e.value.op == "connect" and "hello" in e.value.message


def test_async_timeouts(silent_listener):
    async def body():
        c = segstore.AsyncClient("127.0.0.1", silent_listener, hello=False, timeout=SHORT)
        start = time.monotonic()
        results = await asyncio.gather(*(c.get(f"u{i}") for i in range(10)), return_exceptions=True)
        assert time.monotonic() - start >= SHORT
        assert all(isinstance(r, Timeout) for r in results)
        assert c.in_flight == 0
        await c.close()
        with pytest.raises(Timeout):
            c = segstore.AsyncClient("127.0.0.1", silent_listener, connect_timeout=SHORT)
            await c.connect()

    asyncio.run(body())


def test_a_late_answer_is_dropped(fake_server):
    """A get times out; its answer comes after the next request's was asked
    for, and only the next one's answer is taken."""

    def serve(conn: socket.socket, index: int) -> None:
        first = server.read_frame(conn)
        second = server.read_frame(conn)
        for frame, ids in ((first, [1]), (second, [2])):
            rid = int.from_bytes(frame[8:12], "big")
            conn.sendall(p.Frame(p.Op.GET, 0, 0, rid, p.pack({"count": 1, "ids": ids})).encode())
        server.read_frame(conn)

    server = fake_server(serve)
    with segstore.Client("127.0.0.1", server.port, hello=False, timeout=SHORT) as c:
        with pytest.raises(Timeout):
            c.get("a")
        c.timeout = 30
        assert c.get("b") == GetResult(1, [2])
        assert server.connections == 1


def _close_after_reading(server_box):
    def serve(conn: socket.socket, index: int) -> None:
        server_box[0].read_frame(conn)  # then closes without an answer

    return serve


def test_a_write_is_never_sent_again(fake_server):
    box = []
    server = fake_server(_close_after_reading(box))
    box.append(server)
    c = segstore.Client("127.0.0.1", server.port, hello=False, timeout=30)
    with pytest.raises(ConnectionLost) as e:
        c.upsert("alice", [S.forever(1)])
    assert e.value.maybe_applied and e.value.status is segstore.Status.Unavailable
    assert "may or may not" in e.value.message
    assert isinstance(e.value, ConnectionError)
    assert len(server.frames) == 1
    # The next call opens a new connection.
    with pytest.raises(ConnectionLost):
        c.delete("alice")
    assert len(server.frames) == 2 and server.connections == 2
    c.close()


def test_a_read_is_sent_once_more_on_a_new_connection(fake_server):
    def serve(conn: socket.socket, index: int) -> None:
        frame = server.read_frame(conn)
        if index == 0:
            return  # the first connection breaks before the answer
        rid = int.from_bytes(frame[8:12], "big")
        conn.sendall(p.Frame(p.Op.GET, 0, 0, rid, p.pack({"count": 1, "ids": [5]})).encode())
        server.read_frame(conn)

    server = fake_server(serve)
    with segstore.Client("127.0.0.1", server.port, hello=False, timeout=30) as c:
        assert c.get("alice") == GetResult(1, [5])
    assert len(server.frames) == 2 and server.frames[0][16:] == server.frames[1][16:]


def test_a_read_is_not_sent_a_third_time(fake_server):
    box = []
    server = fake_server(_close_after_reading(box))
    box.append(server)
    with segstore.Client("127.0.0.1", server.port, hello=False, timeout=30) as c:
        with pytest.raises(ConnectionLost) as e:
            c.get("alice")
        assert not e.value.maybe_applied and "second connection" in e.value.message
    assert len(server.frames) == 2
    with segstore.Client("127.0.0.1", server.port, hello=False, retry_reads=False) as c:
        with pytest.raises(ConnectionLost):
            c.count("alice")
    assert len(server.frames) == 3


def test_async_reads_retried_writes_not(fake_server):
    """Both on one connection that breaks: the read comes back from a second
    connection, the write raises."""

    def serve(conn: socket.socket, index: int) -> None:
        if index == 0:
            server.read_frame(conn)
            server.read_frame(conn)
            return
        frame = server.read_frame(conn)
        rid = int.from_bytes(frame[8:12], "big")
        conn.sendall(p.Frame(frame[3], 0, 0, rid, p.pack({"count": 1, "ids": [5]})).encode())
        server.read_frame(conn)

    server = fake_server(serve)

    async def body():
        async with segstore.AsyncClient("127.0.0.1", server.port, hello=False, timeout=30) as c:
            read, write = await asyncio.gather(
                c.get("alice"), c.upsert("alice", [S.forever(1)]), return_exceptions=True
            )
            assert read == GetResult(1, [5])
            assert isinstance(write, ConnectionLost) and write.maybe_applied

    asyncio.run(body())
    ops = [f[3] for f in server.frames]
    assert sorted(ops) == [p.Op.GET, p.Op.GET, p.Op.UPSERT]


def test_pipeline_over_a_broken_connection(fake_server):
    """Unanswered reads are sent again on a new connection; unanswered writes fail in place."""

    def answer(conn: socket.socket, frame: bytes) -> None:
        rid = int.from_bytes(frame[8:12], "big")
        conn.sendall(p.Frame(frame[3], 0, 0, rid, p.pack({"count": 0, "ids": []})).encode())

    def serve(conn: socket.socket, index: int) -> None:
        if index == 0:  # answers the first of three, then breaks
            frames = [server.read_frame(conn) for _ in range(3)]
            answer(conn, frames[0])
            return
        while True:
            frame = server.read_frame(conn)
            if frame is None:
                return
            answer(conn, frame)

    server = fake_server(serve)
    with segstore.Client("127.0.0.1", server.port, hello=False, timeout=30) as c:
        results = (
            c.pipeline().get("a").upsert("a", [S.forever(1)]).get("b").execute(raise_on_error=False)
        )
    assert results[0] == GetResult(0, []) and results[2] == GetResult(0, [])
    assert isinstance(results[1], ConnectionLost) and results[1].maybe_applied
    assert [f[3] for f in server.frames] == [p.Op.GET, p.Op.UPSERT, p.Op.GET, p.Op.GET]


def test_unreachable_server_is_unavailable():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(Unavailable) as e:
        segstore.Client("127.0.0.1", port).ping()
    assert e.value.op == "connect" and not isinstance(e.value, ConnectionLost)

    async def body():
        with pytest.raises(Unavailable):
            await segstore.AsyncClient("127.0.0.1", port).ping()

    asyncio.run(body())


@pytest.fixture
def own_server(start_segstored):
    """A server of the test's own, free to be restarted."""
    return start_segstored()


def test_reconnect_after_the_server_restarts(own_server, user):
    c = own_server.client()
    c.upsert(user, [S.forever(1)])
    own_server.restart()
    # The connection the client holds is gone; it opens a new one before
    # sending, so even a write goes through.
    assert c.upsert(user, [S.forever(2)]).count == 2
    own_server.restart()
    assert c.get(user).ids == [1, 2]
    # While the server is down calls fail; once it is back they work again.
    own_server.stop()
    with pytest.raises(Unavailable):
        c.get(user)
    own_server.start()
    assert c.get(user).ids == [1, 2]
    c.close()


def test_async_reconnect_after_the_server_restarts(own_server, user):
    async def body():
        loop = asyncio.get_running_loop()
        async with own_server.async_client() as c:
            await c.upsert(user, [S.forever(1)])
            # The loop runs while the server restarts, so the client sees the
            # connection end and the next call opens a new one.
            await loop.run_in_executor(None, own_server.restart)
            assert (await c.upsert(user, [S.forever(2)])).count == 2
            await loop.run_in_executor(None, own_server.restart)
            results = await asyncio.gather(*(c.get(user) for _ in range(50)))
            assert all(r.ids == [1, 2] for r in results)

    asyncio.run(body())


def test_busy_when_the_server_has_all_the_connections_it_allows(start_segstored):
    server = start_segstored(config="[server]\nmax_connections = 1\n")
    with server.client() as first:
        first.ping()
        with pytest.raises(Busy) as e:
            server.client().connect()
        assert e.value.message and e.value.status.name == "Busy"

        async def body():
            with pytest.raises(Busy):
                await server.async_client().connect()

        asyncio.run(body())
        first.ping()  # the connected client is still served


def test_unsupported_protocol_version(server):
    """A frame of another version gets Unsupported, with its op and request ID."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(p.Frame(p.Op.PING, 0, 0, 77, b"", version=2).encode())
        reader = p.FrameReader()
        frames = []
        while not frames:
            data = s.recv(4096)
            assert data, "the server closed the connection without an answer"
            frames = reader.feed(data)
    err = p.error_of(frames[0])
    assert isinstance(err, segstore.Unsupported) and err.message
    assert (frames[0].op, frames[0].request_id) == (p.Op.PING, 77)


def test_device_full(start_segstored):
    """Distinct users' profiles fill a 16 MiB data file: DeviceFull, nothing written."""
    server = start_segstored(
        "--file-size", "16MiB",
        config='[storage]\nwrite_block_size = "64KiB"\ndurability = "buffered"\n',
    )  # fmt: skip
    rnd = random.Random(1)
    segments = [
        [i * 7919 + rnd.randrange(1000), 2000000000 + rnd.randrange(10**8), False,
         rnd.randrange(2**32), rnd.randrange(2**32)]
        for i in range(3000)
    ]  # fmt: skip
    with server.client() as c:
        for n in range(2000):  # about 250 fill it
            body = {"user": f"full-{n}", "mode": "set", "segments": segments}
            try:
                c.call(p.Op.UPSERT, body)
            except segstore.DeviceFull as e:
                assert e.op == "upsert" and "full" in e.message
                break
        else:
            pytest.fail("the device never filled")
        with pytest.raises(segstore.NotFound):
            c.get(f"full-{n}")  # the refused write wrote nothing
        assert c.get("full-0").count == 3000
