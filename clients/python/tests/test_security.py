"""TLS (server verification, mutual TLS) and the shared secret, against real
segstored processes configured as README's "Running it exposed" says, with
certificates made for the session (conftest's pki)."""

from __future__ import annotations

import asyncio
import os
import secrets
import ssl

import pytest

import segstore
from segstore import TlsOptions, Unauthenticated, Unavailable, SegmentUpdate as S


@pytest.fixture(scope="session")
def secret_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("secret") / "secret"
    secret = secrets.token_hex(24)
    path.write_text(f"# the test's secret\n{secret}\n")
    os.chmod(path, 0o600)
    return path, secret


@pytest.fixture(scope="session")
def tls_server(start_segstored, pki):
    return start_segstored("--tls-cert", pki.server_cert, "--tls-key", pki.server_key)


@pytest.fixture(scope="session")
def mtls_server(start_segstored, pki):
    return start_segstored(
        "--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-client-ca", pki.ca
    )  # fmt: skip


@pytest.fixture(scope="session")
def secret_server(start_segstored, secret_file):
    return start_segstored("--auth-secret-file", str(secret_file[0]))


@pytest.fixture(scope="session")
def tls_secret_server(start_segstored, pki, secret_file):
    return start_segstored(
        "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
        "--auth-secret-file", str(secret_file[0]),
    )  # fmt: skip


def roundtrip(c: segstore.Client, user: str) -> None:
    c.upsert(user, [S.forever(1)])
    assert c.get(user).ids == [1]


# ---- TLS ----


def test_tls_with_the_servers_ca(tls_server, pki, user):
    with tls_server.client(tls=TlsOptions(ca_file=pki.ca)) as c:
        roundtrip(c, user)
        assert isinstance(c._conn.sock, ssl.SSLSocket)
    # The certificate names localhost too.
    with segstore.Client("localhost", tls_server.port, tls=TlsOptions(ca_file=pki.ca)) as c:
        c.ping()
    # An SSLContext of the caller's own works as well.
    ctx = ssl.create_default_context(cafile=pki.ca)
    with tls_server.client(tls=ctx) as c:
        c.ping()


def test_tls_async(tls_server, pki, user):
    async def body():
        async with tls_server.async_client(tls=TlsOptions(ca_file=pki.ca)) as c:
            await c.upsert(user, [S.forever(1)])
            results = await asyncio.gather(*(c.get(user) for _ in range(200)))
            assert all(r.ids == [1] for r in results)

    asyncio.run(body())


def test_tls_refuses_a_certificate_of_another_ca(tls_server, pki):
    with pytest.raises(Unavailable) as e:
        tls_server.client(tls=TlsOptions(ca_file=pki.other_ca)).connect()
    assert "certificate" in e.value.message and e.value.op == "connect"

    async def body():
        with pytest.raises(Unavailable):
            await tls_server.async_client(tls=TlsOptions(ca_file=pki.other_ca)).connect()

    asyncio.run(body())


def test_tls_checks_the_name(tls_server, pki):
    with pytest.raises(Unavailable) as e:
        tls_server.client(tls=TlsOptions(ca_file=pki.ca, server_name="example.org")).connect()
    assert "certificate" in e.value.message
    # verify=False encrypts without proving anything: it connects.
    with tls_server.client(tls=TlsOptions(verify=False)) as c:
        c.ping()


def test_plain_client_on_a_tls_port(tls_server):
    with pytest.raises(Unavailable):
        tls_server.client().connect()


def test_tls_client_on_a_plain_port(server, pki):
    with pytest.raises(Unavailable):
        server.client(tls=TlsOptions(ca_file=pki.ca)).connect()


def test_bad_tls_files_are_invalid_arguments(tls_server, pki, tmp_path):
    with pytest.raises(segstore.InvalidArgument):
        tls_server.client(tls=TlsOptions(ca_file=str(tmp_path / "missing.pem"))).connect()
    with pytest.raises(segstore.InvalidArgument):
        TlsOptions(cert_file=pki.client_cert).context()  # no key


def test_mutual_tls(mtls_server, pki, user):
    good = TlsOptions(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    with mtls_server.client(tls=good) as c:
        roundtrip(c, user)

    async def body():
        async with mtls_server.async_client(tls=good) as c:
            await c.ping()

    asyncio.run(body())
    # Without a client certificate, or with one of another CA, the handshake
    # fails (with TLS 1.3 the client learns it at its first read: the hello).
    for tls in (
        TlsOptions(ca_file=pki.ca),
        TlsOptions(ca_file=pki.ca, cert_file=pki.other_client_cert, key_file=pki.other_client_key),
    ):
        with pytest.raises(Unavailable):
            mtls_server.client(tls=tls).connect()


# ---- the shared secret ----


def test_the_right_secret(secret_server, secret_file, user):
    path, secret = secret_file
    with secret_server.client(auth_secret=secret) as c:
        roundtrip(c, user)
    # A secret makes the client say hello whatever `hello` says.
    with secret_server.client(auth_secret_file=path, hello=False) as c:
        assert c.server_info is not None
        c.ping()

    async def body():
        async with secret_server.async_client(auth_secret=secret.encode()) as c:
            assert (await c.get(user)).ids == [1]

    asyncio.run(body())


def test_a_wrong_secret(secret_server):
    with pytest.raises(Unauthenticated) as e:
        secret_server.client(auth_secret="not-the-secret-at-all").connect()
    assert e.value.status.name == "Unauthenticated" and e.value.message

    async def body():
        with pytest.raises(Unauthenticated):
            await secret_server.async_client(auth_secret="not-the-secret-at-all").connect()

    asyncio.run(body())


def test_a_missing_secret(secret_server, user):
    # The hello without a secret is refused; the connection stays open.
    with pytest.raises(Unauthenticated) as e:
        secret_server.client().connect()
    assert e.value.message
    # Without hello, every request is refused, and the connection stays usable.
    with secret_server.client(hello=False) as c:
        for _ in range(2):
            with pytest.raises(Unauthenticated) as e:
                c.get(user)
            assert e.value.op == "get"
        # Saying hello with the secret later is not possible without it.
        with pytest.raises(Unauthenticated):
            c.hello()


def test_tls_and_the_secret_together(tls_secret_server, pki, secret_file, user):
    path, _ = secret_file
    with tls_secret_server.client(tls=TlsOptions(ca_file=pki.ca), auth_secret_file=path) as c:
        roundtrip(c, user)
    with pytest.raises(Unauthenticated):
        tls_secret_server.client(tls=TlsOptions(ca_file=pki.ca)).connect()
    with pytest.raises(Unavailable):
        tls_secret_server.client(auth_secret_file=path).connect()  # plain TCP


def test_secret_file_format(tmp_path):
    f = tmp_path / "s"
    f.write_bytes(b"# comment\n\n  0123456789abcdef0123 \r\nsecond-secret-line-here\n")
    assert segstore.read_secret_file(f) == b"0123456789abcdef0123"
    f.write_text("short\n")
    with pytest.raises(segstore.InvalidArgument):
        segstore.read_secret_file(f)
    with pytest.raises(segstore.InvalidArgument):
        segstore.Client(auth_secret="x" * 20, auth_secret_file=str(f))
