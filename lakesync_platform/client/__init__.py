"""The Python client SDK: local SQLite, tracker, persistent outbox, sync engine, transports.

::

    from lakesync_platform.client import GatewayConfig, create_client

    client = create_client(
        name="notes",
        schemas=[{"table": "notes", "columns": [{"name": "text", "type": "string"}]}],
        client_id="alice",
        gateway=GatewayConfig(url="http://127.0.0.1:8000", gateway_id="demo", token=jwt),
    )
    client.tracker.insert("notes", "n1", {"text": "hello"})   # local, instant, queued
    client.coordinator.sync_once()                           # pull all pages, then push
    client.execute_action("alerts", "notify", {"text": "hi"})        # runs once on the gateway
    client.close()

See ``docs/client.md`` for the whole API and the guarantees behind it.
"""

from ._actions import ActionEntry, ActionQueue, ActionResponse, ActionTransport
from ._client import GatewayConfig, LakeSyncClient, create_client, system_clock_ms
from ._coordinator import SyncCoordinator, SyncMode, SyncReport
from ._db import LocalDB
from ._errors import DeadLetterError, RowExistsError, RowNotFoundError, TransportError
from ._http import HttpTransport
from ._outbox import Outbox, OutboxEntry
from ._retry import backoff_ms
from ._schemas import SchemaRegistry, SchemaSynchroniser
from ._tracker import SyncTracker
from ._transport import (
    Checkpoint,
    InProcessTransport,
    OfflineTransport,
    PullResponse,
    PushAck,
    RealtimeTransport,
    RefusedWrite,
    Transport,
)
from ._watch import QueryWatch
from ._ws import WebSocketTransport

__all__ = [
    "ActionEntry",
    "ActionQueue",
    "ActionResponse",
    "ActionTransport",
    "Checkpoint",
    "DeadLetterError",
    "GatewayConfig",
    "HttpTransport",
    "InProcessTransport",
    "LakeSyncClient",
    "LocalDB",
    "OfflineTransport",
    "Outbox",
    "OutboxEntry",
    "PullResponse",
    "PushAck",
    "QueryWatch",
    "RealtimeTransport",
    "RefusedWrite",
    "RowExistsError",
    "RowNotFoundError",
    "SchemaRegistry",
    "SchemaSynchroniser",
    "SyncCoordinator",
    "SyncMode",
    "SyncReport",
    "SyncTracker",
    "Transport",
    "TransportError",
    "WebSocketTransport",
    "backoff_ms",
    "create_client",
    "system_clock_ms",
]
