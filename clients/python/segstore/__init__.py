"""segstore: a Python client for the segstore user-profile store.

Speaks the binary wire protocol of proto/PROTOCOL.md to one ``segstored``:
:class:`Client` (blocking, with :class:`Pipeline`) and
:class:`~segstore.aio.AsyncClient` (asyncio, many requests in flight on one
connection). Both take the same settings and return the same dataclasses;
every failure is a :class:`SegstoreError` subclass named after its status.

    import segstore
    from segstore import SegmentUpdate

    with segstore.Client("127.0.0.1", 7700) as c:
        c.upsert("alice", [SegmentUpdate.expiring_in(5484, 5 * 3600)])
        print(c.get("alice", projection="ids").ids)

Cluster routing is not done here: a client talks to the one server it is
given (a cluster node answers WrongNode for users it does not hold).
"""

from ._version import __version__
from .aio import AsyncClient
from .client import Client, Pipeline
from .errors import (
    Busy,
    Conflict,
    ConnectionLost,
    Corruption,
    DeviceFull,
    DeviceIOError,
    InDoubt,
    Internal,
    InvalidArgument,
    LimitExceeded,
    LogUnavailable,
    NotFound,
    ProtocolError,
    ReadOnly,
    SegstoreError,
    Status,
    Timeout,
    Unauthenticated,
    Unavailable,
    Unsupported,
    WrongNode,
    error_class,
)
from .models import (
    COPY_FINISHED,
    MAX_U32,
    MAX_U64,
    ClusterMap,
    Condition,
    CopiedRecord,
    CopyPartitionResult,
    CountResult,
    DeleteResult,
    ExpireOutcome,
    ExpireResult,
    Field,
    FieldMaxResult,
    FieldUpdate,
    FieldWriteResult,
    GetOptions,
    GetResult,
    IncrementResult,
    LinkedUser,
    LinkResult,
    LinksPage,
    LinkStepResult,
    Mode,
    Node,
    Projection,
    RemoveResult,
    Segment,
    SegmentUpdate,
    ServerInfo,
    StepKind,
    StoredRecord,
    Time,
    TrimResult,
    UpsertItem,
    UpsertResult,
    UserId,
    new_write_id,
)
from .options import ClientOptions, TlsOptions, format_address, parse_address, read_secret_file
from .protocol import Op

__all__ = [
    "AsyncClient",
    "Busy",
    "COPY_FINISHED",
    "Client",
    "ClientOptions",
    "ClusterMap",
    "Condition",
    "Conflict",
    "ConnectionLost",
    "CopiedRecord",
    "CopyPartitionResult",
    "Corruption",
    "CountResult",
    "DeleteResult",
    "DeviceFull",
    "DeviceIOError",
    "ExpireOutcome",
    "ExpireResult",
    "Field",
    "FieldMaxResult",
    "FieldUpdate",
    "FieldWriteResult",
    "GetOptions",
    "GetResult",
    "InDoubt",
    "IncrementResult",
    "Internal",
    "InvalidArgument",
    "LimitExceeded",
    "LinkResult",
    "LinkStepResult",
    "LinkedUser",
    "LinksPage",
    "LogUnavailable",
    "MAX_U32",
    "MAX_U64",
    "Mode",
    "Node",
    "NotFound",
    "Op",
    "Pipeline",
    "Projection",
    "ProtocolError",
    "ReadOnly",
    "RemoveResult",
    "Segment",
    "SegmentUpdate",
    "SegstoreError",
    "ServerInfo",
    "Status",
    "StepKind",
    "StoredRecord",
    "Time",
    "Timeout",
    "TlsOptions",
    "TrimResult",
    "Unauthenticated",
    "Unavailable",
    "Unsupported",
    "UpsertItem",
    "UpsertResult",
    "UserId",
    "WrongNode",
    "__version__",
    "error_class",
    "format_address",
    "new_write_id",
    "parse_address",
    "read_secret_file",
]
