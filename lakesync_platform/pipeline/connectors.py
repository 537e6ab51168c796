"""The connectors stage: poll one registered connector once into the WAL.

:func:`run_connector` reads the connector's config from the gateway's config store (declared
in YAML or registered through the admin route), resolves its ``${VAR}`` secrets from the
settings' environment (never logged, never stored), builds its streams — the SQL ``cursor``
strategy on the driver (:mod:`lakesync_platform.connectors.sql.cursor`), the ``diff``
strategy as a Spark job (:mod:`lakesync_platform.spark.connector_diff`) — and runs them with
:func:`~lakesync_platform.connectors.runner.run_streams`, appending through
:meth:`SyncService.append <lakesync_platform.sync.service.SyncService.append>`: the same
validation, merge and commit as a client's push, as client ``ingest:<connector>``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from croniter import croniter
from sqlalchemy import Engine

from ..connectors.model import Change, Page, RunReport, Stream
from ..connectors.runner import run_streams
from ..connectors.sql.cursor import SqlCursorStream, source_engine, sqlalchemy_url
from ..core.connectors import (
    DEFAULT_CHUNK_SIZE,
    SQL_TYPES,
    ConnectorConfig,
    CursorStrategy,
    resolve_secrets,
)
from ..core.errors import NotFoundError, ValidationError
from ..spark.connector_diff import SnapshotDiff
from ..spark.wal_source import jdbc_source
from ..sync.service import SyncService
from .context import PipelineContext

__all__ = [
    "DiffStream",
    "connector_config",
    "due_tick",
    "registered_connectors",
    "run_connector",
]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class DiffStream:
    """A ``diff``-strategy table as a stream: the diff's changes in pages, then an empty page
    whose commit promotes the staged snapshot."""

    diff: SnapshotDiff
    page_size: int = 500

    @property
    def name(self) -> str:
        """State key: the gateway table."""
        return self.diff.spec.table

    @property
    def table(self) -> str:
        """The gateway table written."""
        return self.diff.spec.table

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """Stage the source, stream its differences, promote it once they are committed."""
        rows = self.diff.stage()
        page: list[Change] = []
        for row_id, row in self.diff.changes(rows):
            page.append(Change(row_id, row))
            if len(page) >= self.page_size:
                yield Page(page, api_calls=0)
                page = []
        if page:
            yield Page(page)
        yield Page([], {"snapshotRows": rows}, after_commit=self.diff.promote, api_calls=1)


def registered_connectors(ctx: PipelineContext) -> list[tuple[str, ConnectorConfig]]:
    """Every registered connector of every gateway as ``(gw, config)`` (declarations applied
    first, so declared connectors are registered)."""
    ctx.apply_declarations()
    return [(gw, cfg) for gw in ctx.gateways() for cfg in ctx.wal.connectors(gw).values()]


def due_tick(cron: str, after_s: float, now_s: float) -> int | None:
    """The latest tick of ``cron`` (UTC) in ``(after_s, now_s]`` as epoch seconds, or ``None``
    when none fell in that window."""
    start = dt.datetime.fromtimestamp(now_s, dt.UTC)
    previous = croniter(cron, start + dt.timedelta(seconds=1)).get_prev(float)
    return int(previous) if after_s < previous <= now_s else None


def connector_config(ctx: PipelineContext, gw: str, name: str) -> ConnectorConfig:
    """The registered config of ``name`` (declarations applied first)."""
    ctx.apply_declarations()
    found = ctx.wal.connectors(gw).get(name)
    if found is None:
        raise NotFoundError(f'Connector "{name}" is not registered for gateway "{gw}"')
    return found


def _streams(
    ctx: PipelineContext, gw: str, cfg: ConnectorConfig, opened: list[Engine]
) -> list[Stream]:
    if cfg.type not in SQL_TYPES or cfg.ingest is None:
        raise ValidationError(f'Connector type "{cfg.type}" cannot be polled by this release')
    url = resolve_secrets(str(cfg.source["connectionString"]), ctx.settings.env)
    chunk = cfg.ingest.chunk_size
    streams: list[Stream] = []
    engine = None
    for spec in cfg.ingest.tables:
        if isinstance(spec.strategy, CursorStrategy):
            if engine is None:
                engine = source_engine(url)
                opened.append(engine)
            streams.append(SqlCursorStream(spec, engine, page_size=chunk))
        else:
            diff = SnapshotDiff(ctx.spark, jdbc_source(sqlalchemy_url(url)), spec, gw, cfg.name)
            streams.append(DiffStream(diff, page_size=chunk))
    return streams


def run_connector(
    ctx: PipelineContext, gw: str, name: str, *, clock: Callable[[], int] = _wall_ms
) -> RunReport:
    """Poll connector ``name`` of ``gw`` once; raises on any failure (state then stays at the
    last committed page)."""
    cfg = connector_config(ctx, gw, name)
    service = SyncService(ctx.wal, clock)
    opened: list[Engine] = []
    try:
        return run_streams(
            _streams(ctx, gw, cfg, opened),
            gw=gw,
            connector=cfg.name,
            append=lambda deltas: service.append(gw, cfg.name, deltas),
            store=ctx.wal,
            clock=clock,
            chunk_size=cfg.ingest.chunk_size if cfg.ingest else DEFAULT_CHUNK_SIZE,
        )
    finally:
        for engine in opened:
            engine.dispose()
