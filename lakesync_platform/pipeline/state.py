"""The state stage: new change-log entries → one Iceberg state table per table (per-column LWW).

:func:`run_state` is the entry point over :func:`lakesync_platform.spark.state.update_state`
for each of the gateway's registered tables; :func:`check_state_matches_log` replays the log
through :func:`lakesync_platform.core.merge.merge_delta` and compares.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..core.delta import ColumnDelta, RowDelta
from ..core.merge import RowState, merge_delta
from ..core.schema import TableSchema
from ..spark.layout import (
    CURSOR_COL,
    LIVE_COL,
    client_col,
    deltas_table,
    hlc_col,
    log_table,
    state_table,
    state_value,
    synced_columns,
    table_exists,
)
from ..spark.state import StateResult, update_state
from .context import CheckOutcome, PipelineContext

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_state_matches_log", "run_state"]


def run_state(ctx: PipelineContext, gw: str, tables: list[str] | None = None) -> list[StateResult]:
    """Merge new log entries into the state table of each (selected) table, holding the lake's
    lock."""
    schemas = ctx.tables(gw)
    names = tables if tables is not None else list(schemas)
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive("state", gw):
        catalog = ctx.lake_catalog
        return [update_state(spark, catalog, gw, schemas[t]) for t in names if t in schemas]


def check_state_matches_log(ctx: PipelineContext, gw: str, table: str) -> CheckOutcome:
    """The state table equals a replay of the lake's change log through core merge.

    Replays every log entry of the table up to the state's watermark with
    :func:`~lakesync_platform.core.merge.merge_delta` and compares row by row (values,
    per-column stamps, delete stamp, liveness).
    """
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive(f"check of the state of {table}", gw):
        return _check_state(ctx, spark, gw, table)


def _check_state(ctx: PipelineContext, spark: SparkSession, gw: str, table: str) -> CheckOutcome:
    from pyspark.sql import functions as F

    schema = ctx.tables(gw)[table]
    name = state_table(gw, log_table(schema))
    if not table_exists(spark, name):
        return CheckOutcome(True, "no state table yet", {"rows": 0})
    rows = {r["row_id"]: r.asDict() for r in spark.table(name).collect()}
    mark = max((int(r[CURSOR_COL]) for r in rows.values()), default=0)
    entries = (
        spark.table(deltas_table(gw))
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
        if rid not in rows or rid not in replay or not _same_state(schema, rows[rid], replay[rid])
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


def _same_state(schema: TableSchema, row: Mapping[str, Any], state: RowState) -> bool:
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
        if state_value(row[col], typ) != expected:
            return False
    return True
