"""What the admin and meta routes ask of a gateway: status, config reads and flush requests.

:class:`GatewayAdmin` is the service behind every route that is not push or pull: it reads the
WAL store's counters, registered schemas and sync rules, queues flush requests, and answers
readiness, and registers, lists and unregisters connectors. Routes call it and never reach
the store themselves. Writes that change what the
sync engine serves (schemas, sync rules) go through the sync service, which keeps its cached
view of a gateway's config in step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..core.connectors import ConnectorConfig
from ..core.errors import NotFoundError
from ..core.identifiers import check_gateway_id
from ..core.schema import TableSchema
from ..core.sync_rules import SyncRules
from ..core.wal import FlushRequest, GatewayStats

__all__ = [
    "RECENT_FLUSH_REQUESTS",
    "AdminStore",
    "GatewayAdmin",
    "GatewayStatus",
    "VersionedSchema",
]

RECENT_FLUSH_REQUESTS = 20
"""How many flush requests a gateway's status lists."""


class AdminStore(Protocol):
    """The part of the WAL store the admin service reads and writes."""

    def ping(self) -> None:
        """Raise if the store does not answer."""

    def gateway_ids(self) -> list[str]:
        """Every gateway id the store knows."""
        ...

    def stats(self, gw: str) -> GatewayStats:
        """Counters of ``gw``."""
        ...

    def oldest_unflushed_ms(self, gw: str) -> int | None:
        """Ingest time of the oldest entry of ``gw`` not yet in the lake."""
        ...

    def schemas(self, gw: str) -> dict[str, TableSchema]:
        """Registered schemas of ``gw`` by table."""
        ...

    def schema_versions(self, gw: str) -> dict[str, int]:
        """Version of each registered schema of ``gw``."""
        ...

    def sync_rules(self, gw: str) -> SyncRules | None:
        """The sync rules of ``gw``, if saved."""
        ...

    def request_flush(self, gw: str, now_ms: int) -> FlushRequest:
        """Queue a flush of ``gw``."""
        ...

    def recent_flush_requests(self, gw: str, limit: int) -> list[FlushRequest]:
        """The newest ``limit`` flush requests of ``gw`` whatever their status, newest last."""
        ...

    def connectors(self, gw: str) -> dict[str, ConnectorConfig]:
        """The connectors registered for ``gw`` by name."""
        ...

    def save_connector(
        self, gw: str, cfg: ConnectorConfig, now_ms: int = 0, *, replace: bool = False
    ) -> None:
        """Register ``cfg`` (409 if the name exists)."""
        ...

    def delete_connector(self, gw: str, name: str) -> bool:
        """Unregister ``name`` and drop its state."""
        ...


@dataclass(frozen=True, slots=True)
class GatewayStatus:
    """One gateway's counters, the age of its backlog and its recent flush requests."""

    stats: GatewayStats
    oldest_unflushed_ms: int | None
    flush_requests: list[FlushRequest]


@dataclass(frozen=True, slots=True)
class VersionedSchema:
    """A registered schema with its version (1 on first save, +1 per evolution)."""

    schema: TableSchema
    version: int


class GatewayAdmin:
    """Status, config reads and flush requests over a WAL store; ``clock`` is epoch ms."""

    def __init__(self, store: AdminStore, clock: Callable[[], int]) -> None:
        self._store = store
        self._clock = clock

    def ping(self) -> None:
        """Raise if the store does not answer (readiness)."""
        self._store.ping()

    def backlogs(self) -> dict[str, tuple[int, int]]:
        """Unflushed ``(entries, bytes)`` of every known gateway."""
        out = {}
        for gw in self._store.gateway_ids():
            s = self._store.stats(gw)
            out[gw] = (s.backlog_entries, s.backlog_bytes)
        return out

    def status(self, gw: str) -> GatewayStatus:
        """Counters, backlog age and the newest :data:`RECENT_FLUSH_REQUESTS` flush requests."""
        return GatewayStatus(
            self._store.stats(gw),
            self._store.oldest_unflushed_ms(gw),
            self._store.recent_flush_requests(gw, RECENT_FLUSH_REQUESTS),
        )

    def schemas(self, gw: str) -> list[VersionedSchema]:
        """Every registered schema of ``gw`` with its version, by table name."""
        schemas = self._store.schemas(gw)
        versions = self._store.schema_versions(gw)
        return [VersionedSchema(s, versions.get(name, 1)) for name, s in sorted(schemas.items())]

    def schema_version(self, gw: str, table: str) -> int:
        """The version of ``table``'s registered schema (1 if it has none yet)."""
        return self._store.schema_versions(gw).get(table, 1)

    def sync_rules(self, gw: str) -> SyncRules:
        """The saved sync rules of ``gw``; :class:`NotFoundError` if none were saved."""
        rules = self._store.sync_rules(gw)
        if rules is None:
            raise NotFoundError("No sync rules saved for this gateway")
        return rules

    def request_flush(self, gw: str) -> FlushRequest:
        """Queue a flush of ``gw`` for the pipeline (its outcome shows in :meth:`status`)."""
        return self._store.request_flush(check_gateway_id(gw), self._clock())

    def connectors(self, gw: str) -> list[ConnectorConfig]:
        """The connectors registered for ``gw``, by name."""
        return list(self._store.connectors(gw).values())

    def register_connector(self, gw: str, cfg: ConnectorConfig) -> None:
        """Register a validated connector (the pipeline polls it from its next sensor tick);
        a name already registered is a 409 ``VALIDATION_ERROR``."""
        self._store.save_connector(check_gateway_id(gw), cfg, self._clock())

    def unregister_connector(self, gw: str, name: str) -> None:
        """Unregister ``name`` and forget its cursors; :class:`NotFoundError` if unknown."""
        if not self._store.delete_connector(gw, name):
            raise NotFoundError(f'Connector "{name}" not found')
