"""The lifecycle stage's destination half: rows no run wrote for a while move to the cold tier.

A destination with a ``lifecycle`` block (:class:`~lakesync_platform.declarations.model
.LifecycleDecl`) keeps recent rows; :func:`run_tiering` moves each of its tables' rows whose
``synced_at`` is older than ``after`` into the declared ``cold`` destination, through
:class:`~lakesync_platform.adapters.tiers.SqlTier` — committed in cold before they leave hot,
so a crash never loses a row, and a re-run finishes what a crashed one began.

Materialise keeps the tiers apart (:func:`cold_tier`): a moved row that changes again is
promoted back into the hot table in the same transaction as its change and released from the
cold one afterwards, so it lives in exactly one tier, the hot one; rows that do not change stay
cold, never re-inserted or duplicated. Both stages hold the lake's lock, so a move never races a
materialise run of the same gateway.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ..adapters.sql import SqlAdapter
from ..adapters.tiers import SqlTier
from ..core.errors import AdapterError
from ..core.schema import TableSchema
from ..declarations import DestinationDecl
from .context import PipelineContext

__all__ = ["TierResult", "cold_tier", "run_tiering"]


@dataclass(frozen=True, slots=True)
class TierResult:
    """One destination table's move: rows moved to ``cold``, copied but kept hot (written
    meanwhile), and stale cold copies released."""

    gateway_id: str
    destination: str
    cold: str
    table: str
    moved: int
    kept: int
    released: int
    seconds: float


def run_tiering(
    ctx: PipelineContext,
    gw: str,
    *,
    now: datetime | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[TierResult]:
    """Move the old rows of every destination of ``gw`` that declares a lifecycle, holding the
    lake's lock (materialise does not run meanwhile)."""
    declared = ctx.destinations(gw)
    tiered = {n: d for n, d in declared.items() if d.lifecycle is not None}
    if not tiered:
        return []
    schemas = ctx.tables(gw)
    moment = now or datetime.now(UTC)
    out: list[TierResult] = []
    with ctx.exclusive("lifecycle", gw):
        for name, dest in tiered.items():
            assert dest.lifecycle is not None
            cutoff = moment - timedelta(seconds=dest.lifecycle.after_s)
            cold = declared[dest.lifecycle.to]
            for table, schema in schemas.items():
                if not dest.covers(table):
                    continue
                started = clock()
                with _tier(ctx, dest, cold, schema) as tier:
                    if not tier.hot_exists():
                        continue
                    done = tier.move(cutoff, dest.lifecycle.batch)
                out.append(
                    TierResult(
                        gw,
                        name,
                        cold.name,
                        table,
                        done.moved,
                        done.kept,
                        done.released,
                        clock() - started,
                    )
                )
    return out


@contextmanager
def cold_tier(
    ctx: PipelineContext, gw: str, dest: DestinationDecl, hot: object, schema: TableSchema
) -> Iterator[SqlTier | None]:
    """The cold tier of ``dest``'s table of ``schema`` for materialise to pass on (``None``
    when ``dest`` declares no lifecycle); ``hot`` is the open hot destination."""
    if dest.lifecycle is None:
        yield None
        return
    cold = _sql(ctx.open_destination(ctx.destinations(gw)[dest.lifecycle.to]), dest.lifecycle.to)
    try:
        yield SqlTier(_sql(hot, dest.name), cold, schema, schema.table)
    finally:
        cold.close()


@contextmanager
def _tier(
    ctx: PipelineContext, hot: DestinationDecl, cold: DestinationDecl, schema: TableSchema
) -> Iterator[SqlTier]:
    hot_side = _sql(ctx.open_destination(hot), hot.name)
    try:
        cold_side = _sql(ctx.open_destination(cold), cold.name)
        try:
            yield SqlTier(hot_side, cold_side, schema, schema.table)
        finally:
            cold_side.close()
    finally:
        hot_side.close()


def _sql(opened: object, name: str) -> SqlAdapter:
    if not isinstance(opened, SqlAdapter):  # the declarations allow SQL kinds only
        raise AdapterError(f"destination {name!r} is not a SQL destination: it cannot be tiered")
    return opened
