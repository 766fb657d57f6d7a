"""Connection settings shared by the sync and asyncio clients: address,
timeouts, TLS and the shared secret."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Optional, Tuple, Union

from ._version import __version__
from .errors import InvalidArgument

DEFAULT_PORT = 7700
DEFAULT_CLIENT_NAME = f"segstore-py {__version__}"


def parse_address(text: str, default_port: int = DEFAULT_PORT) -> Tuple[str, int]:
    """``"host:port"``, ``"host"`` or ``"[v6 address]:port"`` as ``(host, port)``."""
    host, port = text, str(default_port)
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (end + 1 < len(text) and text[end + 1] != ":"):
            raise InvalidArgument(f"server address {text!r}: expected [v6 address]:port")
        host = text[1:end]
        if end + 1 < len(text):
            port = text[end + 2 :]
    elif text.count(":") == 1:
        host, port = text.split(":")
    elif ":" in text:
        raise InvalidArgument(f"server address {text!r}: put an IPv6 address in brackets")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"server address {text!r}: expected host:port")
    return host, int(port)


def format_address(host: str, port: int) -> str:
    """``"host:port"``, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def read_secret_file(path: Union[str, os.PathLike]) -> bytes:
    """The first secret of a secret file, in segstored's own format.

    One secret per line; spaces, tabs and a trailing CR around it are
    dropped; empty lines and lines starting with ``#`` are skipped. A secret
    is 16 to 1024 bytes. InvalidArgument when the file holds none.
    """
    with open(path, "rb") as f:
        for line in f:
            secret = line.strip(b" \t\r\n")
            if not secret or secret.startswith(b"#"):
                continue
            if not 16 <= len(secret) <= 1024:
                raise InvalidArgument(f"{path}: a secret is 16 to 1024 bytes, not {len(secret)}")
            return secret
    raise InvalidArgument(f"{path}: no secret in the file")


@dataclass(frozen=True)
class TlsOptions:
    """TLS to a server with a certificate (its ``[tls]`` settings).

    The server's certificate is verified against ``ca_file`` (PEM; None: the
    system's trust store) and must name the host, or ``server_name``.

    Attributes:
        ca_file: PEM file of the CAs to trust.
        cert_file, key_file: a client certificate and its key, for a server
            that requires one (mutual TLS).
        server_name: the name the certificate must carry (and SNI); None:
            the host the client connects to.
        verify: False accepts any certificate: it encrypts but proves nothing.
    """

    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    server_name: Optional[str] = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        """An SSLContext for these settings (TLS 1.2 or later)."""
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            if not self.verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if self.cert_file or self.key_file:
                if not (self.cert_file and self.key_file):
                    raise InvalidArgument("TLS: a client certificate needs both its file and key")
                ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as e:
            raise InvalidArgument(f"TLS: {e}") from None
        return ctx


TlsSetting = Union[None, bool, TlsOptions, ssl.SSLContext]


@dataclass(frozen=True)
class ClientOptions:
    """Everything a client needs to open a connection; see :class:`segstore.Client`."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    timeout: Optional[float] = 5.0
    connect_timeout: Optional[float] = 5.0
    tls: TlsSetting = None
    auth_secret: Optional[bytes] = None
    hello: bool = True
    client_name: str = DEFAULT_CLIENT_NAME
    retry_reads: bool = True

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    @property
    def says_hello(self) -> bool:
        """A secret makes the client say hello whatever ``hello`` says."""
        return self.hello or bool(self.auth_secret)

    def ssl_context(self) -> Optional[ssl.SSLContext]:
        if self.tls is None or self.tls is False:
            return None
        if isinstance(self.tls, ssl.SSLContext):
            return self.tls
        if self.tls is True:
            return TlsOptions().context()
        return self.tls.context()

    @property
    def server_hostname(self) -> Optional[str]:
        if isinstance(self.tls, TlsOptions) and self.tls.server_name:
            return self.tls.server_name
        return self.host


def make_options(
    host: str,
    port: int,
    *,
    timeout: Optional[float],
    connect_timeout: Optional[float],
    tls: TlsSetting,
    auth_secret: Union[str, bytes, None],
    auth_secret_file: Union[str, os.PathLike, None],
    hello: bool,
    client_name: str,
    retry_reads: bool,
) -> ClientOptions:
    """Checks the clients' keyword arguments and gathers them."""
    if not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidArgument(f"port: {port!r} is not a TCP port")
    if auth_secret is not None and auth_secret_file is not None:
        raise InvalidArgument("give auth_secret or auth_secret_file, not both")
    secret: Optional[bytes] = None
    if auth_secret_file is not None:
        secret = read_secret_file(auth_secret_file)
    elif auth_secret is not None:
        secret = auth_secret.encode() if isinstance(auth_secret, str) else bytes(auth_secret)
    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if value is not None and not value > 0:
            raise InvalidArgument(f"{name}: {value!r} is not a positive number of seconds")
    if not isinstance(tls, (bool, TlsOptions, ssl.SSLContext)) and tls is not None:
        raise InvalidArgument("tls: expected True, a TlsOptions or an ssl.SSLContext")
    return ClientOptions(
        host=host,
        port=port,
        timeout=timeout,
        connect_timeout=connect_timeout,
        tls=tls,
        auth_secret=secret,
        hello=hello,
        client_name=client_name,
        retry_reads=retry_reads,
    )
