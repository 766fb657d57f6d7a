"""Fixtures: a real segstored (a child process on an ephemeral loopback
port), throwaway TLS certificates, and small fake servers.

The daemon is the one built by this tree: $SEGSTORED (tests/python/run.sh
passes the build's), else build/src/server/segstored under the repository.
It tells us its port the way systemd would hear it: we hand it a datagram
socket as $NOTIFY_SOCKET and wait for "READY=1 ... serving on HOST:PORT",
as tests/integration/daemon.h does. Each daemon is stopped by its own PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

import segstore

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
# Readiness is awaited, never guessed; a sanitizer build on a busy machine starts slowly.
READY_TIMEOUT = 120.0

PDEATHSIG = shutil.which("setpriv")  # util-linux

# Limits low enough to reach in a test; hello reports them.
TEST_CONFIG = """\
[server]
max_batch = 20
max_frame_bytes = "64KiB"
[storage]
max_key_bytes = 64
[profile]
max_segments = 50
max_links = 4
max_fields = 12
max_field_bytes = 100
"""


def segstored_path() -> Optional[str]:
    path = os.environ.get("SEGSTORED")
    if path:
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"SEGSTORED={path} is not an executable")
        return path
    default = REPO / "build" / "src" / "server" / "segstored"
    return str(default) if os.access(default, os.X_OK) else None


def examples_dir() -> Path:
    return Path(os.environ.get("SEGSTORE_EXAMPLES", REPO / "proto" / "examples"))


class Segstored:
    """One segstored process in its own directory, restartable on its port."""

    def __init__(self, binary: str, workdir: Path, args: List[str], config: str = "") -> None:
        self.binary = binary
        self.workdir = workdir
        self.args = list(args)
        self.data = workdir / "segstore.dat"
        self.log = workdir / "segstored.log"
        self.config = workdir / "segstored.toml"
        self.config.write_text(config)
        self.port = 0
        self.process: Optional[subprocess.Popen] = None
        # A short path: a Unix socket's name is at most 107 bytes.
        self._sockdir = tempfile.mkdtemp(prefix="sgpy")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "Segstored":
        notify_path = os.path.join(self._sockdir, "notify.sock")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "NOTIFY_SOCKET" and not k.startswith("WATCHDOG_")
        }
        env["NOTIFY_SOCKET"] = notify_path
        argv = [
            self.binary,
            "--config", str(self.config),
            "--listen", f"127.0.0.1:{self.port}",
            "--admin-listen", "off",
            "--data", str(self.data),
            "--threads", "2",
            *self.args,
        ]  # fmt: skip
        if "--file-size" not in self.args:
            argv += ["--file-size", "16MiB"]  # the smallest: the file is allocated
        if PDEATHSIG:
            # Killed when the thread that started it ends, should pytest itself
            # be killed (ctest's timeout) before it could stop the daemon. So
            # start a daemon from a thread that outlives its use (an asyncio
            # executor's threads last until its asyncio.run returns).
            argv = [PDEATHSIG, "--pdeathsig", "KILL", "--", *argv]
        try:
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    argv, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT
                )
            self.port = self._await_ready(notify)
        finally:
            notify.close()
        return self

    def _await_ready(self, notify: socket.socket) -> int:
        deadline = time.monotonic() + READY_TIMEOUT
        notify.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                message = notify.recv(4096).decode()
            except socket.timeout:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"segstored exited with {self.process.returncode} before it was ready:\n"
                        + self.log.read_text()
                    )
                continue
            for line in message.splitlines():
                if line.startswith("STATUS=serving on "):
                    return int(line.split("serving on ")[1].split(",")[0].rsplit(":", 1)[1])
        self.stop()
        raise RuntimeError(
            f"segstored was not ready within {READY_TIMEOUT} s:\n{self.log.read_text()}"
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stops the process (its own PID) and returns its exit status."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return process.returncode if process is not None else 0
        process.send_signal(sig)
        try:
            return process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def restart(self) -> "Segstored":
        """Stops and starts again on the same port, with the same data file."""
        self.stop()
        return self.start()

    def client(self, **kwargs) -> segstore.Client:
        kwargs.setdefault("timeout", 30.0)
        kwargs.setdefault("connect_timeout", 30.0)
        return segstore.Client("127.0.0.1", self.port, **kwargs)

    def async_client(self, **kwargs) -> segstore.AsyncClient:
        kwargs.setdefault("timeout", 30.0)
        kwargs.setdefault("connect_timeout", 30.0)
        return segstore.AsyncClient("127.0.0.1", self.port, **kwargs)

    def cleanup(self) -> None:
        self.stop(signal.SIGKILL)
        shutil.rmtree(self._sockdir, ignore_errors=True)


@pytest.fixture(scope="session")
def segstored_binary() -> str:
    path = segstored_path()
    if path is None:
        pytest.skip("no segstored: build it or set SEGSTORED")
    return path


@pytest.fixture(scope="session")
def start_segstored(
    segstored_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Segstored]]:
    """A factory: start_segstored(*args, config=TEST_CONFIG) starts a daemon,
    stopped at the end of the session."""
    started: List[Segstored] = []

    def start(*args: str, config: str = TEST_CONFIG) -> Segstored:
        d = Segstored(segstored_binary, tmp_path_factory.mktemp("segstored"), list(args), config)
        started.append(d)
        return d.start()

    yield start
    for d in started:
        d.cleanup()


@pytest.fixture(scope="session")
def server(start_segstored) -> Segstored:
    """The shared plain server (TEST_CONFIG's limits). Tests use their own users."""
    return start_segstored()


@pytest.fixture
def client(server: Segstored) -> Iterator[segstore.Client]:
    with server.client() as c:
        yield c


@pytest.fixture
def user() -> str:
    """A user ID no other test uses."""
    return f"u-{uuid.uuid4().hex[:16]}"


# ---- TLS ----


@dataclass
class Pki:
    dir: Path
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str
    other_client_cert: str
    other_client_key: str


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(dir: Path, name: str, cn: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={cn}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=dir,
    )  # fmt: skip


def _leaf(dir: Path, name: str, ca: str, cn: str, extensions: str) -> None:
    (dir / f"{name}.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n" + extensions
    )
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}",
        cwd=dir,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=dir,
    )  # fmt: skip
    os.chmod(dir / f"{name}.key", 0o600)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throwaway CA with a server and a client certificate, and an unrelated CA
    with a client certificate of its own (as tests/support/test_pki.h makes)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca", "segstore-py test CA")
    _ca(d, "other_ca", "segstore-py other CA")
    _leaf(d, "server", "ca", "localhost",
          "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")  # fmt: skip
    _leaf(d, "client", "ca", "segstore-py-test-client", "extendedKeyUsage=clientAuth\n")
    _leaf(d, "other_client", "other_ca", "segstore-py-test-client", "extendedKeyUsage=clientAuth\n")
    return Pki(
        dir=d,
        ca=str(d / "ca.pem"),
        server_cert=str(d / "server.pem"),
        server_key=str(d / "server.key"),
        client_cert=str(d / "client.pem"),
        client_key=str(d / "client.key"),
        other_ca=str(d / "other_ca.pem"),
        other_client_cert=str(d / "other_client.pem"),
        other_client_key=str(d / "other_client.key"),
    )


# ---- fake servers ----


class FakeServer:
    """A loopback listener whose connections are handled by ``handler(conn, index)``
    on a thread each. For what a real server will not do on demand: never
    answer, close mid-request, answer with chosen bytes."""

    def __init__(self, handler: Optional[Callable[[socket.socket, int], None]] = None) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.handler = handler
        self.connections = 0
        self.frames: List[bytes] = []  # every whole request frame received, in order
        self._threads: List[threading.Thread] = []
        self._conns: List[socket.socket] = []
        self._stopping = False
        if handler is not None:
            t = threading.Thread(target=self._accept, daemon=True)
            t.start()
            self._threads.append(t)

    def _accept(self) -> None:
        while not self._stopping:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            index = self.connections
            self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn, index), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket, index: int) -> None:
        self._conns.append(conn)
        with conn:
            try:
                self.handler(conn, index)
            except OSError:
                pass

    def read_frame(self, conn: socket.socket) -> Optional[bytes]:
        """One whole request frame from ``conn`` (None at end of stream), recorded."""
        header = _read_exactly(conn, 16)
        if header is None:
            return None
        body = _read_exactly(conn, int.from_bytes(header[12:16], "big"))
        if body is None:
            return None
        self.frames.append(header + body)
        return header + body

    def close(self) -> None:
        self._stopping = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=10)


def _read_exactly(conn: socket.socket, n: int) -> Optional[bytes]:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


@pytest.fixture
def fake_server() -> Iterator[Callable[..., FakeServer]]:
    made: List[FakeServer] = []

    def make(handler: Optional[Callable[[socket.socket, int], None]] = None) -> FakeServer:
        s = FakeServer(handler)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def read_example(name: str) -> bytes:
    """The bytes of proto/examples/<name>.hex (comment lines dropped)."""
    text = (examples_dir() / f"{name}.hex").read_text()
    return bytes.fromhex(" ".join(l for l in text.splitlines() if not l.startswith("#")))


def stat_of(stats: Dict[str, object], name: str) -> int:
    value = stats.get(name, 0)
    assert isinstance(value, (int, float)), (name, value)
    return int(value)
