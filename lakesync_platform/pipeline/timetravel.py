"""Reading the lake back: its gateways and tables, each table's history, and queries at a past
moment or snapshot (``lakesync history``, ``lakesync query``, ``lakesync status``).

What only needs the tables' metadata — the gateways and tables, the snapshots with their
summaries, which snapshot each table is read at — is read with pyiceberg, without a JVM: so
``lakesync history`` answers in well under a second, and a query with a bad table, snapshot or
timestamp fails before Spark starts. The query itself runs on Spark SQL
(:mod:`lakesync_platform.spark.timetravel`). Where pyiceberg cannot reach the catalog (a catalog
other than SQLite or PostgreSQL), the metadata is read through Spark instead.

Reads take no lock: they never commit, and the snapshots they read stay until expiry, which
keeps every snapshot of the time-travel window (``UpkeepSettings.snapshot_retention_s``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import NotFoundError
from ..spark.history import TableHistory, history_from_pyiceberg, history_from_spark
from ..spark.layout import namespace, q
from ..spark.session import CATALOG, pyiceberg_catalog
from ..spark.timetravel import Pins, QueryResult, format_ms, parse_as_of, pin_tables, run_query
from ..spark.upkeep import TableFiles, files_in, upkeep_commit
from .context import PipelineContext, spark_settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = [
    "LakeReader",
    "Pins",
    "QueryRequest",
    "QueryResult",
    "TableHistory",
    "TableSummary",
    "format_ms",
    "parse_as_of",
]


@dataclass(frozen=True, slots=True)
class TableSummary:
    """What ``lakesync status`` says of a lake table: its current files and snapshots, and
    when upkeep last committed to it (``None``: never)."""

    table: str
    files: TableFiles
    last_upkeep_ms: int | None


@dataclass(frozen=True, slots=True)
class QueryRequest:
    """One ``lakesync query``: the SQL, when to read the lake at, and the row limit."""

    sql: str
    as_of_ms: int | None = None
    snapshot_id: int | None = None
    max_rows: int = 1000


class LakeReader:
    """Read-only access to the lake of one pipeline context (metadata by pyiceberg where it
    can, else Spark; queries by Spark)."""

    def __init__(self, ctx: PipelineContext) -> None:
        self.ctx = ctx

    @cached_property
    def catalog(self) -> Catalog | None:
        """pyiceberg over the lake's catalog (any warehouse), or ``None`` when it cannot read
        that catalog; :class:`NotFoundError` when the embedded catalog is not there yet."""
        settings = spark_settings(self.ctx.settings)
        uri = settings.resolved_catalog_uri
        if uri.startswith("jdbc:sqlite:"):
            path = Path(uri.removeprefix("jdbc:sqlite:").split("?", 1)[0])
            if not path.exists():  # reading must not create it
                raise NotFoundError(f"no lake at {path}: nothing has been flushed yet")
        try:
            return pyiceberg_catalog(settings)
        except ValueError:  # a catalog URI pyiceberg does not translate: Spark reads it
            return None

    def gateways(self) -> list[str]:
        """The gateways that have a namespace in the lake."""
        if self.catalog is not None:
            return sorted(ns[-1] for ns in self.catalog.list_namespaces())
        rows = self.ctx.spark.sql(f"SHOW NAMESPACES IN {CATALOG}").collect()
        return sorted(str(r[0]) for r in rows)

    def require_gateway(self, gw: str | None) -> str:
        """``gw``, or the lake's only gateway; :class:`NotFoundError` naming the known ones."""
        known = self.gateways()
        if gw is None and len(known) == 1:
            return known[0]
        if gw is None or gw not in known:
            listed = ", ".join(known) or "none: nothing flushed yet"
            what = "name one with --gw" if gw is None else f"no gateway {gw!r} in the lake"
            raise NotFoundError(f"{what} (gateways in the lake: {listed})")
        return gw

    def tables(self, gw: str) -> list[str]:
        """The tables in ``gw``'s namespace."""
        if self.catalog is not None:
            return sorted(ident[-1] for ident in self.catalog.list_tables(gw))
        rows = self.ctx.spark.sql(f"SHOW TABLES IN {namespace(gw)}").collect()
        return sorted(str(r["tableName"]) for r in rows if not r["isTemporary"])

    def history(self, gw: str, table: str) -> TableHistory:
        """``table``'s history; :class:`NotFoundError` naming the gateway's tables."""
        known = self.tables(gw)
        if table not in known:
            raise NotFoundError(
                f"no table {table!r} in gateway {gw!r} (tables: {', '.join(known) or 'none'})"
            )
        return self._history(gw, table)

    def histories(self, gw: str) -> dict[str, TableHistory]:
        """Every table's history."""
        return {t: self._history(gw, t) for t in self.tables(gw)}

    def _history(self, gw: str, table: str) -> TableHistory:
        if self.catalog is not None:
            return history_from_pyiceberg(self.catalog.load_table((gw, table)))
        return history_from_spark(self.ctx.spark, f"{namespace(gw)}.{q(table)}")

    def pins(self, gw: str, request: QueryRequest) -> Pins:
        """The snapshot each of ``gw``'s tables is read at for ``request`` (checked: a bad
        snapshot or timestamp fails here, before Spark starts)."""
        return pin_tables(
            self.histories(gw),
            gw,
            as_of_ms=request.as_of_ms,
            snapshot_id=request.snapshot_id,
        )

    def query(self, gw: str, request: QueryRequest, pins: Pins | None = None) -> QueryResult:
        """Run ``request`` over ``gw``'s tables at their pinned snapshots."""
        chosen = pins if pins is not None else self.pins(gw, request)
        return run_query(
            self.ctx.spark, namespace(gw), request.sql, chosen, max_rows=request.max_rows
        )

    def summaries(self, gw: str) -> list[TableSummary]:
        """Each of ``gw``'s tables: files, snapshots and its last upkeep commit."""
        out = []
        for table, found in self.histories(gw).items():
            upkept = [s.timestamp_ms for s in found.snapshots if upkeep_commit(s)]
            out.append(TableSummary(table, files_in(found), max(upkept) if upkept else None))
        return out
