"""What the sync and asyncio clients share beyond the protocol: request IDs,
the limits learned from hello, option handling and the internal signals
their connections raise."""

from __future__ import annotations

import dataclasses
import ssl
from typing import Any, Dict, Optional

from .errors import ConnectionLost, InvalidArgument, LimitExceeded, SegstoreError
from .models import GetOptions, ServerInfo
from .options import ClientOptions
from .protocol import DEFAULT_GET_OPTIONS, DEFAULT_MAX_IN_FLIGHT, Request


class NotSent(Exception):
    """The frame was not handed over whole: the server cannot have run it."""


class Lost(Exception):
    """The connection broke after the frame was sent, before its answer."""

    def __init__(self, reason: str, server_error: Optional[SegstoreError] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.server_error = server_error


class Closed(Lost):
    """The client itself closed the connection while the request waited."""


class TimedOut(Exception):
    """No answer within the timeout."""


def reason(e: BaseException) -> str:
    """A short account of why a socket or TLS operation failed."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"TLS: the server's certificate was not accepted: {e.verify_message}"
    if isinstance(e, ssl.SSLError):
        return f"TLS: {e.reason or e}"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def get_options(options: Optional[GetOptions], fields: Dict[str, Any]) -> GetOptions:
    """``options`` (or the defaults) with ``fields`` overriding its fields."""
    if options is not None and not isinstance(options, GetOptions):
        raise TypeError(f"options: expected a GetOptions, not {type(options).__name__}")
    if not fields:
        return options if options is not None else DEFAULT_GET_OPTIONS
    return dataclasses.replace(options if options is not None else DEFAULT_GET_OPTIONS, **fields)


class ClientBase:
    """Request IDs, limits and error wording, for both clients."""

    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._server_info: Optional[ServerInfo] = None
        self._last_id = 0

    @property
    def options(self) -> ClientOptions:
        """The settings the client was made with."""
        return self._options

    @property
    def timeout(self) -> Optional[float]:
        """Seconds to wait for each answer (None: forever); may be changed."""
        return self._options.timeout

    @timeout.setter
    def timeout(self, seconds: Optional[float]) -> None:
        if seconds is not None and not seconds > 0:
            raise InvalidArgument(f"timeout: {seconds!r} is not a positive number of seconds")
        self._options = dataclasses.replace(self._options, timeout=seconds)

    @property
    def address(self) -> str:
        """``"host:port"`` of the server."""
        return self._options.address

    @property
    def server_info(self) -> Optional[ServerInfo]:
        """The server's latest hello answer (its limits); None before one."""
        return self._server_info

    def _next_request_id(self) -> int:
        # 1 to 2^32-1, then around again: 0 is what the server uses for
        # errors of the whole connection.
        self._last_id = self._last_id % 0xFFFFFFFF + 1
        return self._last_id

    @property
    def _max_in_flight(self) -> int:
        info = self._server_info
        if info is not None and info.max_in_flight:
            return info.max_in_flight
        return DEFAULT_MAX_IN_FLIGHT

    def _check_limits(self, req: Request) -> None:
        """LimitExceeded, without sending, for what the server would refuse.

        A body over max_frame_bytes would make the server close the
        connection; a batch over max_batch is refused whole.
        """
        info = self._server_info
        if info is None:
            return
        if len(req.body) > info.max_frame_bytes:
            raise LimitExceeded(
                f"the request body is {len(req.body)} bytes, over the server's "
                f"max_frame_bytes of {info.max_frame_bytes}: not sent",
                op=req.name,
                address=self.address,
            )
        if req.batch > info.max_batch:
            raise LimitExceeded(
                f"{req.batch} entries, over the server's max_batch of {info.max_batch}: not sent",
                op=req.name,
                address=self.address,
            )

    def _lost_error(self, req: Request, lost: Lost, retried: bool) -> ConnectionLost:
        if isinstance(lost, Closed):
            text = "the client closed the connection before the answer"
        else:
            text = f"the connection broke before the answer ({lost.reason})"
            if lost.server_error is not None:
                text = f"the server closed the connection: {lost.server_error}"
        if retried:
            text += ", on a second connection too"
        if not req.idempotent:
            text += "; the write may or may not have been made, and was not sent again"
        return ConnectionLost(
            text, op=req.name, address=self.address, maybe_applied=not req.idempotent
        )
