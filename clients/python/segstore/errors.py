"""Status codes of the wire protocol and the exceptions that carry them.

Every failure the client reports is a :class:`SegstoreError`. Its ``status``
is a :class:`Status` (an ``IntEnum``: ``err.status.name`` is the protocol's
name, ``int(err.status)`` its code) and its ``message`` is the server's
sentence, as sent, or the client's own for failures found on this side
(timeouts, lost connections, limits checked before sending).

There is one subclass per status code of proto/PROTOCOL.md, so callers catch
exactly what they can handle::

    try:
        profile = client.get("alice")
    except segstore.NotFound:
        profile = None

A few errors are also instances of the matching built-in exception, so code
that knows nothing of segstore still handles them sensibly:
:class:`InvalidArgument` is a ``ValueError``, :class:`Timeout` a
``TimeoutError`` and :class:`ConnectionLost` a ``ConnectionError``.
"""

from __future__ import annotations

import enum
from typing import Dict, Optional, Type, Union


class Status(enum.IntEnum):
    """The status byte of a response header (PROTOCOL.md, "Status codes")."""

    OK = 0
    NotFound = 1
    InvalidArgument = 2
    Corruption = 3
    IOError = 4
    DeviceFull = 5
    Conflict = 6
    LimitExceeded = 7
    Busy = 8
    Unavailable = 9
    Internal = 10
    Unsupported = 11
    Timeout = 12
    Unauthenticated = 13
    WrongNode = 14
    LogUnavailable = 15
    InDoubt = 16
    ReadOnly = 17


class SegstoreError(Exception):
    """Base of every error this package raises.

    Attributes:
        status: the :class:`Status` (for a code this client does not know,
            the plain ``int``).
        message: the server's message as sent, or the client's own.
        op: the operation's name (``"get"``, ``"batch_upsert"``...), when
            the error belongs to one.
        address: ``"host:port"`` of the server, when known.
        user: the user ID of a batch entry that failed alone, else ``None``.
    """

    status: Union[Status, int] = Status.Internal

    def __init__(
        self,
        message: str,
        *,
        op: Optional[str] = None,
        address: Optional[str] = None,
        status: Union[Status, int, None] = None,
        user: Union[str, bytes, None] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.op = op
        self.address = address
        self.user = user
        if status is not None:
            self.status = status

    @property
    def code(self) -> int:
        """The numeric status code."""
        return int(self.status)

    @property
    def status_name(self) -> str:
        """The protocol's name of the status (``"Status42"`` for an unknown code)."""
        if isinstance(self.status, Status):
            return self.status.name
        return f"Status{int(self.status)}"

    def __str__(self) -> str:
        where = ""
        if self.op and self.address:
            where = f"{self.op} to {self.address}: "
        elif self.op:
            where = f"{self.op}: "
        elif self.address:
            where = f"{self.address}: "
        return f"{self.status_name}: {where}{self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, op={self.op!r})"


class NotFound(SegstoreError):
    """The user has no profile (no live segment); for master_of and links, is in no group."""

    status = Status.NotFound


class InvalidArgument(SegstoreError, ValueError):
    """The request is malformed or a value is out of bounds (server or client side)."""

    status = Status.InvalidArgument


class Corruption(SegstoreError):
    """The stored record failed validation on the server."""

    status = Status.Corruption


class ProtocolError(Corruption):
    """The server sent bytes this client cannot read as the protocol says.

    Reported with status ``Corruption``, as the C++ client does; the
    connection is closed, since the stream can no longer be trusted.
    """


class DeviceIOError(SegstoreError):
    """The server's device failed (status ``IOError``)."""

    status = Status.IOError


class DeviceFull(SegstoreError):
    """No space for the write; nothing was written."""

    status = Status.DeviceFull


class Conflict(SegstoreError):
    """Internal write conflict on the server (not normally seen)."""

    status = Status.Conflict


class LimitExceeded(SegstoreError):
    """A limit would be passed (segments, batch, frame size); nothing was written.

    Also raised by the client, without sending, for a request whose body is
    over the server's ``max_frame_bytes`` or a batch over its ``max_batch``.
    """

    status = Status.LimitExceeded


class Busy(SegstoreError):
    """Too much work in flight or too many connections: retry later."""

    status = Status.Busy


class Unavailable(SegstoreError):
    """The server is shutting down, refuses writes, or cannot be reached."""

    status = Status.Unavailable


class ConnectionLost(Unavailable, ConnectionError):
    """The connection broke (or the server closed it) before the answer came.

    A request that was sent may or may not have been carried out: for a
    write, ``maybe_applied`` is true and the client did not send it again
    (proto/PROTOCOL.md, "End of stream"). Send it again yourself if that is
    safe, with the same ``write_id`` in a cluster.
    """

    def __init__(self, message: str, *, maybe_applied: bool = False, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.maybe_applied = maybe_applied


class Internal(SegstoreError):
    """A bug in the server."""

    status = Status.Internal


class Unsupported(SegstoreError):
    """Unknown operation or protocol version."""

    status = Status.Unsupported


class Timeout(SegstoreError, TimeoutError):
    """No answer within the client's timeout (never sent by servers).

    A write that timed out may or may not have been made.
    """

    status = Status.Timeout


class Unauthenticated(SegstoreError):
    """The server wants a hello with its shared secret first, or the secret was wrong."""

    status = Status.Unauthenticated


class WrongNode(SegstoreError):
    """A cluster node does not hold the user's partition.

    Attributes:
        revision: the partition map revision the node went by, when sent.
    """

    status = Status.WrongNode

    def __init__(self, message: str, *, revision: Optional[int] = None, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.revision = revision


class LogUnavailable(SegstoreError):
    """A cluster's log did not take the write: nothing was written; retry later."""

    status = Status.LogUnavailable


class InDoubt(SegstoreError):
    """A cluster write may or may not have been made: resend it with the same write_id."""

    status = Status.InDoubt


class ReadOnly(SegstoreError):
    """A write sent to a passive cluster: nothing was written; send it to the active one."""

    status = Status.ReadOnly


_BY_STATUS: Dict[int, Type[SegstoreError]] = {
    Status.NotFound: NotFound,
    Status.InvalidArgument: InvalidArgument,
    Status.Corruption: Corruption,
    Status.IOError: DeviceIOError,
    Status.DeviceFull: DeviceFull,
    Status.Conflict: Conflict,
    Status.LimitExceeded: LimitExceeded,
    Status.Busy: Busy,
    Status.Unavailable: Unavailable,
    Status.Internal: Internal,
    Status.Unsupported: Unsupported,
    Status.Timeout: Timeout,
    Status.Unauthenticated: Unauthenticated,
    Status.WrongNode: WrongNode,
    Status.LogUnavailable: LogUnavailable,
    Status.InDoubt: InDoubt,
    Status.ReadOnly: ReadOnly,
}


def error_class(code: int) -> Type[SegstoreError]:
    """The exception class for a status code (``SegstoreError`` for an unknown one)."""
    return _BY_STATUS.get(code, SegstoreError)


def error_from_status(
    code: int,
    message: str,
    *,
    op: Optional[str] = None,
    address: Optional[str] = None,
    revision: Optional[int] = None,
    user: Union[str, bytes, None] = None,
) -> SegstoreError:
    """Builds the exception for a non-zero status code and the server's message."""
    cls = error_class(code)
    if cls is WrongNode:
        return WrongNode(message, op=op, address=address, user=user, revision=revision)
    if cls is SegstoreError:
        return SegstoreError(message, op=op, address=address, user=user, status=code)
    return cls(message, op=op, address=address, user=user)
