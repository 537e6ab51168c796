"""``create_client``: open the local store, register schemas, wire tracker, outbox and engine."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..core.actions import ActionErrorResult, ActionResult
from ..core.errors import ValidationError
from ..core.hlc import HLC, decode
from ..core.schema import TableSchema
from ._actions import ActionEntry, ActionQueue, ActionTransport
from ._coordinator import SyncCoordinator, SyncMode, SyncReport
from ._db import LocalDB
from ._http import HttpTransport
from ._kv import SyncState
from ._outbox import Outbox
from ._schemas import SchemaRegistry
from ._stamps import STAMPS_DDL
from ._tracker import SyncTracker
from ._transport import OfflineTransport, Transport
from ._watch import QueryWatch, Rows
from ._ws import HEARTBEAT_S, WebSocketTransport

__all__ = ["GatewayConfig", "LakeSyncClient", "create_client", "system_clock_ms"]

log = logging.getLogger(__name__)


def system_clock_ms() -> int:
    """Wall clock in epoch milliseconds (the default ``clock``)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Where the gateway is and how to authenticate.

    ``get_token`` (called before the first request and again after a 401) takes priority over
    a static ``token``; with neither, requests carry no ``Authorization`` header. ``realtime``
    pushes and pulls over the gateway's WebSocket, which also brings other writers' rows as
    they commit (:class:`WebSocketTransport`); otherwise HTTP. While the socket is open the
    client also pulls from its cursor every ``heartbeat_s`` seconds (``None``: never), the
    safety net for a broadcast that never arrived.
    """

    url: str
    gateway_id: str
    token: str | None = None
    get_token: Callable[[], str] | None = None
    timeout_s: float = 10.0
    retries: int = 2
    realtime: bool = False
    heartbeat_s: float | None = HEARTBEAT_S


class LakeSyncClient:
    """A local-first LakeSync client: ``db``, ``tracker``, ``coordinator``, ``watch``, ``close``."""

    def __init__(
        self, db: LocalDB, registry: SchemaRegistry, coordinator: SyncCoordinator, name: str
    ) -> None:
        self.name = name
        """The client's name (its default database file is ``<name>.lakesync.db``)."""
        self.db = db
        """The local SQLite database."""
        self.coordinator = coordinator
        """The sync engine: ``sync_once``, ``push``, ``pull``, auto-sync, events, outbox."""
        self.tracker = coordinator.tracker
        """Local writes: ``insert``, ``update``, ``delete``, ``upsert``, ``get``, ``query``."""
        self.transport = coordinator.transport
        """How the client talks to its gateway."""
        self._registry = registry
        self._watches: list[QueryWatch] = []

    @property
    def client_id(self) -> str:
        """The identity this client writes and pushes as."""
        return self.coordinator.client_id

    def register_schema(self, schema: TableSchema | Mapping[str, Any]) -> TableSchema:
        """Add a table, or evolve one additively (new columns)."""
        return self._registry.register(schema)

    def schema(self, table: str) -> TableSchema | None:
        """The registered schema of ``table``."""
        return self._registry.get(table)

    def watch(
        self,
        sql: str,
        params: Sequence[Any],
        callback: Callable[[Rows], None],
        *,
        tables: Iterable[str] | None = None,
        initial: bool = True,
    ) -> QueryWatch:
        """Call ``callback(rows)`` now and whenever the query's result changes.

        The query re-runs after each committed change (local write or applied remote page) to
        one of ``tables`` (default: the tables named after ``FROM``/``JOIN`` in ``sql``).
        """
        handle = QueryWatch(self.db, sql, params, callback, tables=tables, initial=initial)
        self._watches.append(handle)
        return handle

    def sync_once(self) -> SyncReport:
        """Shortcut for ``coordinator.sync_once()``."""
        return self.coordinator.sync_once()

    # ---------------------------------------------------------------- actions

    @property
    def _actions(self) -> ActionQueue:
        assert self.coordinator.actions is not None
        return self.coordinator.actions

    def execute_action(
        self,
        connector: str,
        action_type: str,
        params: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> ActionResult | ActionErrorResult | None:
        """Run an action on the gateway's ``connector`` (PROTOCOL.md §8); it runs once.

        The action is queued in the local database first, then sent at once. Returns its
        result, or ``None`` when the gateway could not be reached or answered that the action
        is still running: it stays queued, is sent again (same ``actionId`` and
        ``idempotencyKey``) on the next sync, and its result reaches
        :meth:`on_action_complete` listeners and :meth:`action_result`.
        """
        queued = self._actions.enqueue(connector, action_type, params, idempotency_key)
        try:
            for result in self._actions.process(self.transport, only=queued.action_id):
                return result
        except Exception as exc:
            log.info("action %s queued for the next sync: %s", queued.action_id, exc)
        return None

    def action_result(self, action_id: str) -> ActionResult | ActionErrorResult | None:
        """The final result of a queued action (``None`` while it is not done)."""
        return self._actions.result(action_id)

    def pending_actions(self) -> list[ActionEntry]:
        """Actions waiting to be (re)sent, oldest first."""
        return self._actions.entries("pending") + self._actions.entries("sending")

    def on_action_complete(
        self, listener: Callable[[str, ActionResult | ActionErrorResult], None]
    ) -> Callable[[], None]:
        """Call ``listener(action_id, result)`` with each action's final result; returns a
        function that removes the listener."""
        return self._actions.on_complete(listener)

    def describe_actions(self) -> dict[str, Any]:
        """The gateway's connectors and their action types (``{"connectors": {…}}``, with each
        type's ``paramsSchema``); none when the transport cannot send actions."""
        if not isinstance(self.transport, ActionTransport):
            return {"connectors": {}}
        return self.transport.describe_actions()

    def rebootstrap(self) -> int:
        """Replace what this client holds by the gateway's current checkpoint, then pull from
        it (shortcut for ``coordinator.rebootstrap()``); returns rows received."""
        return self.coordinator.rebootstrap()

    def pull_from(self, source: str) -> int:
        """Pull every page of the gateway's declared source ``source``; returns rows received
        (shortcut for ``coordinator.pull_from(source)``)."""
        return self.coordinator.pull_from(source)

    def close(self) -> None:
        """Stop auto-sync, end watches, close the transport and the database. Idempotent."""
        self.coordinator.stop_auto_sync()
        for handle in self._watches:
            handle.close()
        self._watches.clear()
        if not self.db.closed:
            self.coordinator.persist_clock()
        self.transport.close()
        self.db.close()

    def __enter__(self) -> LakeSyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _transport_for(gateway: GatewayConfig) -> Transport:
    http = HttpTransport(
        gateway.url,
        gateway.gateway_id,
        token=gateway.token,
        get_token=gateway.get_token,
        timeout_s=gateway.timeout_s,
        retries=gateway.retries,
    )
    if not gateway.realtime:
        return http
    return WebSocketTransport(
        gateway.url,
        gateway.gateway_id,
        token=gateway.token,
        get_token=gateway.get_token,
        timeout_s=gateway.timeout_s,
        http=http,
        heartbeat_s=gateway.heartbeat_s,
    )


def _open_db(
    name: str, backend: Literal["file", "memory"], path: str | Path | None, synchronous: str
) -> LocalDB:
    if backend == "memory":
        return LocalDB.memory()
    if backend != "file":
        raise ValueError(f"backend must be 'file' or 'memory', not {backend!r}")
    target = path if path is not None else f"{name}.lakesync.db"
    return LocalDB.open(target, synchronous=synchronous)


def create_client(
    *,
    name: str,
    schemas: Iterable[TableSchema | Mapping[str, Any]] = (),
    client_id: str | None = None,
    gateway: GatewayConfig | None = None,
    transport: Transport | None = None,
    backend: Literal["file", "memory"] = "file",
    path: str | Path | None = None,
    auto_sync_ms: int = 10_000,
    sync_mode: SyncMode = "full",
    clock: Callable[[], int] = system_clock_ms,
    max_retries: int = 10,
    push_batch_size: int = 500,
    pull_page_size: int = 1000,
    synchronous: str = "NORMAL",
) -> LakeSyncClient:
    """Open (or create) a client's local store and wire it to a gateway.

    * ``backend="file"`` keeps everything in one SQLite file (``path``, default
      ``<name>.lakesync.db``); ``"memory"`` keeps it in memory (tests).
    * ``schemas``: :class:`TableSchema` objects or the protocol's JSON shape; each becomes a
      local table (re-registering evolves it additively).
    * ``client_id`` identifies the writer (it must equal the token's ``sub``); by default the
      one stored in the file, or a new random one. Reopening a file with another id raises.
    * ``gateway`` builds an :class:`HttpTransport` (a :class:`WebSocketTransport` with
      ``realtime=True``); ``transport`` supplies any other (e.g.
      :class:`InProcessTransport`); with neither the client works offline only.
    * ``auto_sync_ms > 0`` starts background sync at once; ``0`` leaves it to the caller.
    * ``clock`` (epoch ms) stamps writes and schedules retries; inject one in tests.
    """
    db = _open_db(name, backend, path, synchronous)
    try:
        state = SyncState(db)
        registry = SchemaRegistry(db, clock)
        outbox = Outbox(db)
        with db.transaction():
            state.create()
            db.exec(STAMPS_DDL)
            registry.load()
        outbox.create()
        stored = state.client_id
        if client_id is None:
            client_id = stored or f"client-{uuid.uuid4()}"
        elif stored is not None and stored != client_id:
            raise ValidationError(f'this database belongs to client "{stored}", not "{client_id}"')
        if stored is None:
            state.client_id = client_id
        for schema in schemas:
            registry.register(schema)
        high = max(state.hlc_high, outbox.max_hlc(), ActionQueue.create(db))
        wall, counter = decode(high)
        hlc = HLC(clock, wall=wall, counter=counter)
        if transport is None:
            transport = _transport_for(gateway) if gateway is not None else OfflineTransport()
        tracker = SyncTracker(db, registry, outbox, hlc, client_id, clock)
        actions = ActionQueue(db, hlc, client_id, clock, max_retries)
        coordinator = SyncCoordinator(
            db=db,
            registry=registry,
            outbox=outbox,
            state=state,
            transport=transport,
            tracker=tracker,
            hlc=hlc,
            clock=clock,
            sync_mode=sync_mode,
            max_retries=max_retries,
            push_batch_size=push_batch_size,
            pull_page_size=pull_page_size,
            auto_sync_ms=auto_sync_ms,
            actions=actions,
        )
    except BaseException:
        db.close()
        raise
    client = LakeSyncClient(db, registry, coordinator, name)
    if auto_sync_ms > 0:
        coordinator.start_auto_sync()
    return client
