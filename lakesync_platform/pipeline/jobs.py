"""Run-once pipeline jobs and their checks, shared by Dagster assets and ``lakesync run``.

:class:`Pipeline` owns one Spark session and one WAL handle for a data directory. Its methods
are the thin entry points over the Spark jobs (:mod:`lakesync_platform.spark`):
:meth:`~Pipeline.flush`, :meth:`~Pipeline.state`, :meth:`~Pipeline.materialise`, plus the
checks the Dagster asset checks run. Tables are the gateway's registered schemas (declarations
are applied to the config store first), so a table registered through the admin route flows
through like a declared one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..adapters.sql import SqlAdapter
from ..core.delta import ColumnDelta, RowDelta
from ..core.merge import RowState, merge_delta
from ..core.schema import TableSchema
from ..settings import PipelineSettings
from ..spark.flush import FlushResult, flush_gateway, lake_watermark
from ..spark.layout import (
    CURSOR_COL,
    LIVE_COL,
    client_col,
    deltas_table,
    hlc_col,
    log_table,
    state_table,
    synced_columns,
    table_exists,
)
from ..spark.materialise import MaterialiseResult, materialise_table
from ..spark.session import SparkSettings, create_spark_session, local_pyiceberg_catalog
from ..spark.state import StateResult, update_state
from ..spark.wal_source import jdbc_source
from ..wal.store import WriteAheadLog
from .declarations import (
    Declarations,
    DestinationDecl,
    apply_declarations,
    expand_env,
    load_declarations,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

__all__ = ["CheckOutcome", "Pipeline", "spark_settings"]

log = logging.getLogger(__name__)


def spark_settings(settings: PipelineSettings) -> SparkSettings:
    """The Spark session settings the pipeline settings stand for (embedded defaults under the
    data directory unless given)."""
    return SparkSettings(
        data_dir=settings.data_dir,
        master=settings.spark_master,
        catalog_uri=settings.catalog_uri,
        warehouse=settings.warehouse,
        jar_dir=settings.jar_dir,
        packages=settings.spark_packages,
    )


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """Result of a pipeline check: ``passed`` plus numbers for the UI."""

    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


class Pipeline:
    """Flush, state and materialise for any gateway of one data directory."""

    def __init__(
        self,
        settings: PipelineSettings,
        *,
        spark: SparkSession | None = None,
        wal: WriteAheadLog | None = None,
    ) -> None:
        self.settings = settings
        self._spark = spark
        self._wal = wal
        self._owns_wal = wal is None
        self._declarations: Declarations | None = None

    # ------------------------------------------------------------------ resources

    @property
    def spark(self) -> SparkSession:
        """The Spark session (started on first use)."""
        if self._spark is None:
            self._spark = create_spark_session(spark_settings(self.settings))
        return self._spark

    @cached_property
    def iceberg_catalog(self) -> Catalog | None:
        """pyiceberg over the lake where the driver reads it directly (materialise), else None."""
        return local_pyiceberg_catalog(spark_settings(self.settings))

    @property
    def wal(self) -> WriteAheadLog:
        """The WAL (opened on first use)."""
        if self._wal is None:
            self.settings.data_dir.mkdir(parents=True, exist_ok=True)
            self._wal = WriteAheadLog.open(self.settings.resolved_wal_url)
        return self._wal

    @property
    def declarations(self) -> Declarations:
        """The YAML declarations of the defs folder (loaded once)."""
        if self._declarations is None:
            self._declarations = load_declarations(self.settings.resolved_defs_dir)
        return self._declarations

    def close(self) -> None:
        """Close the WAL if this pipeline opened it (the Spark session stays for reuse)."""
        if self._wal is not None and self._owns_wal:
            self._wal.close()
            self._wal = None

    def apply_declarations(self, now_ms: int = 0) -> int:
        """Register the declared tables in the WAL's config store."""
        return apply_declarations(self.declarations, self.wal, now_ms)

    def gateways(self) -> list[str]:
        """Declared gateways plus every gateway the WAL knows."""
        return sorted(set(self.declarations.gateways) | set(self.wal.gateway_ids()))

    def tables(self, gw: str) -> dict[str, TableSchema]:
        """The gateway's registered schemas (declarations applied first)."""
        decl = self.declarations.gateway(gw)
        for schema in decl.tables.values():
            self.wal.save_schema(gw, schema)
        return dict(sorted(self.wal.schemas(gw).items()))

    def destinations(self, gw: str) -> dict[str, DestinationDecl]:
        """The gateway's declared destinations."""
        return dict(self.declarations.gateway(gw).destinations)

    def adapter(self, dest: DestinationDecl) -> SqlAdapter:
        """Open a destination (``${VAR}`` in its URL expanded from the settings' env)."""
        return SqlAdapter.connect(expand_env(dest.url, self.settings.expansion_env))

    # ------------------------------------------------------------------ jobs

    def flush(
        self,
        gw: str,
        *,
        max_entries: int | None = None,
        after_commit: Callable[[FlushResult], None] | None = None,
    ) -> FlushResult:
        """Flush ``gw``'s WAL to its Iceberg change log (exactly once)."""
        source = jdbc_source(self.wal.url)
        return flush_gateway(
            self.spark, self.wal, source, gw, max_entries=max_entries, after_commit=after_commit
        )

    def state(self, gw: str, tables: list[str] | None = None) -> list[StateResult]:
        """Merge new log entries into the state table of each (selected) table."""
        schemas = self.tables(gw)
        names = tables if tables is not None else list(schemas)
        return [update_state(self.spark, gw, schemas[t]) for t in names if t in schemas]

    def materialise(
        self, gw: str, destinations: list[str] | None = None, tables: list[str] | None = None
    ) -> list[MaterialiseResult]:
        """Write changed state rows to each (selected) destination table."""
        schemas = self.tables(gw)
        results: list[MaterialiseResult] = []
        for name, dest in self.destinations(gw).items():
            if destinations is not None and name not in destinations:
                continue
            adapter = self.adapter(dest)
            try:
                for table, schema in schemas.items():
                    if dest.covers(table) and (tables is None or table in tables):
                        results.append(
                            materialise_table(
                                self.spark, gw, schema, adapter, catalog=self.iceberg_catalog
                            )
                        )
            finally:
                adapter.close()
        return results

    # ------------------------------------------------------------------ checks

    def check_log_exactly_once(self, gw: str) -> CheckOutcome:
        """Every WAL entry up to the lake watermark is in ``lakesync_deltas`` exactly once."""
        from pyspark.sql import functions as F

        mark = lake_watermark(self.spark, gw).cursor
        lake = self.spark.table(deltas_table(gw))
        stats = lake.agg(
            F.count("*").alias("rows"), F.countDistinct("cursor").alias("distinct")
        ).collect()[0]
        duplicates = int(stats["rows"]) - int(stats["distinct"])
        lake_cursors = {
            int(r["cursor"])
            for r in lake.filter(F.col("cursor") <= mark).select("cursor").collect()
        }
        wal_cursors: set[int] = set()
        after = 0
        while True:
            page = self.wal.read_entries(gw, after, 10_000)
            page = [e for e in page if e.cursor <= mark]
            if not page:
                break
            wal_cursors.update(e.cursor for e in page)
            after = page[-1].cursor
        missing = len(wal_cursors - lake_cursors)
        passed = duplicates == 0 and missing == 0
        return CheckOutcome(
            passed,
            f"{len(wal_cursors)} WAL entries ≤ {mark}: {missing} missing, {duplicates} duplicated",
            {
                "lake_rows": int(stats["rows"]),
                "missing": missing,
                "duplicates": duplicates,
                "watermark": mark,
            },
        )

    def check_state_matches_log(self, gw: str, table: str) -> CheckOutcome:
        """The state table equals a replay of the lake's change log through core merge.

        Replays every log entry of the table up to the state's watermark with
        :func:`~lakesync_platform.core.merge.merge_delta` and compares row by row (values,
        per-column stamps, delete stamp, liveness).
        """
        from pyspark.sql import functions as F

        schema = self.tables(gw)[table]
        name = state_table(gw, log_table(schema))
        if not table_exists(self.spark, name):
            return CheckOutcome(True, "no state table yet", {"rows": 0})
        rows = {r["row_id"]: r.asDict() for r in self.spark.table(name).collect()}
        mark = max((int(r[CURSOR_COL]) for r in rows.values()), default=0)
        entries = (
            self.spark.table(deltas_table(gw))
            .filter((F.col("table") == log_table(schema)) & (F.col("cursor") <= mark))
            .select("cursor", "delta_id", "row_id", "op", "client_id", "hlc", "columns")
            .orderBy("cursor")
            .collect()
        )
        replay: dict[str, RowState] = {}
        for e in entries:
            cols = tuple(ColumnDelta(c["column"], c["value"]) for c in json.loads(e["columns"]))
            delta = RowDelta(
                e["op"],
                log_table(schema),
                e["row_id"],
                e["client_id"],
                cols,
                e["hlc"],
                e["delta_id"],
            )
            replay[delta.row_id] = merge_delta(replay.get(delta.row_id), delta).state
        differ = sorted(
            rid
            for rid in set(rows) | set(replay)
            if rid not in rows
            or rid not in replay
            or not _same_state(schema, rows[rid], replay[rid])
        )
        return CheckOutcome(
            not differ,
            f"{len(rows)} state rows vs replay of {len(entries)} log entries: {len(differ)} differ",
            {
                "rows": len(rows),
                "log_entries": len(entries),
                "differ": len(differ),
                "sample": differ[:10],
                "state_cursor": mark,
            },
        )

    def check_destination_matches_state(
        self, gw: str, destination: str, table: str
    ) -> CheckOutcome:
        """The destination table holds every state row: live rows equal, dead rows deleted."""
        schema = self.tables(gw)[table]
        name = state_table(gw, log_table(schema))
        if not table_exists(self.spark, name):
            return CheckOutcome(True, "no state table yet", {"rows": 0})
        adapter = self.adapter(self.destinations(gw)[destination])
        try:
            adapter.ensure_table(schema)
            dest_rows = {r["row_id"]: r for r in adapter.read_rows(schema.table)}
            dialect = adapter.dialect.name
        finally:
            adapter.close()
        differ: list[str] = []
        for row in self.spark.table(name).collect():
            got = dest_rows.get(row["row_id"])
            if not row[LIVE_COL]:
                gone = got is None or got.get("deleted_at") is not None
                if not gone:
                    differ.append(row["row_id"])
                continue
            if got is None or got.get("deleted_at") is not None:
                differ.append(row["row_id"])
                continue
            for col, typ in synced_columns(schema):
                if _dest_value(got[col], typ, dialect) != _state_value(row[col], typ):
                    differ.append(row["row_id"])
                    break
        return CheckOutcome(
            not differ,
            f"{len(differ)} of the state's rows differ in {destination}.{schema.table}",
            {"differ": len(differ), "sample": differ[:10], "destination_rows": len(dest_rows)},
        )


def _state_value(value: Any, typ: str) -> Any:
    if value is None:
        return None
    if typ == "json":
        return json.loads(value)
    return value


def _dest_value(value: Any, typ: str, dialect: str) -> Any:
    if value is None:
        return None
    if typ == "json":
        return value if dialect == "postgresql" else json.loads(value)
    if typ == "boolean":
        return bool(value)
    if typ == "number":
        return float(value)
    return value


def _same_state(schema: TableSchema, row: Mapping[str, Any], state: Any) -> bool:
    if bool(row[LIVE_COL]) != state.live:
        return False
    for col, typ in synced_columns(schema):
        cell = state.columns.get(col)
        if cell is None:
            if row[hlc_col(col)] is not None:
                return False
            continue
        if row[hlc_col(col)] != cell.hlc or row[client_col(col)] != cell.client_id:
            return False
        expected = float(cell.value) if typ == "number" and cell.value is not None else cell.value
        if _state_value(row[col], typ) != expected:
            return False
    return True
