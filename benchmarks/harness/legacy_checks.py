"""The sync job's checks as they were before issue 27, kept verbatim for
``benchmarks/bench_checks.py`` to measure against: each collects whole tables on the driver.

Not used by the pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.merge import RowState, merge_delta
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.pipeline.context import CheckOutcome, PipelineContext
from lakesync_platform.pipeline.tiering import cold_tier
from lakesync_platform.spark.flush import lake_watermark
from lakesync_platform.spark.layout import (
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

__all__ = ["check_destination", "check_log", "check_state"]

_PAGE = 10_000
SparkSession = Any


def check_log(ctx: PipelineContext, gw: str) -> CheckOutcome:
    """The old ``check_log_exactly_once``."""
    with ctx.exclusive("check of the change log", gw):
        return _check_log(ctx, ctx.spark, gw)


def check_state(ctx: PipelineContext, gw: str, table: str) -> CheckOutcome:
    """The old ``check_state_matches_log``."""
    with ctx.exclusive(f"check of the state of {table}", gw):
        return _check_state(ctx, ctx.spark, gw, table)


def check_destination(ctx: PipelineContext, gw: str, destination: str, table: str) -> CheckOutcome:
    """The old ``check_destination_matches_state``."""
    with ctx.exclusive(f"check of {destination}.{table}", gw):
        return _check_destination(ctx, ctx.spark, gw, destination, table)


def _check_log(ctx: PipelineContext, spark: SparkSession, gw: str) -> CheckOutcome:
    from pyspark.sql import functions as F

    wal = ctx.wal
    mark = lake_watermark(spark, gw).cursor
    lake = spark.table(deltas_table(gw))
    stats = lake.agg(
        F.count("*").alias("rows"), F.countDistinct("cursor").alias("distinct")
    ).collect()[0]
    duplicates = int(stats["rows"]) - int(stats["distinct"])
    lake_cursors = {
        int(r["cursor"]) for r in lake.filter(F.col("cursor") <= mark).select("cursor").collect()
    }
    wal_cursors: set[int] = set()
    floor = wal.log_floor(gw)
    after = floor
    while True:
        page = [e for e in wal.read_entries(gw, after, _PAGE) if e.cursor <= mark]
        if not page:
            break
        wal_cursors.update(e.cursor for e in page)
        after = page[-1].cursor
    missing = len(wal_cursors - lake_cursors)
    passed = duplicates == 0 and missing == 0 and mark >= floor
    return CheckOutcome(
        passed,
        f"{len(wal_cursors)} WAL entries {floor + 1}..{mark}: {missing} missing, "
        f"{duplicates} duplicated",
        {
            "lake_rows": int(stats["rows"]),
            "missing": missing,
            "duplicates": duplicates,
            "watermark": mark,
            "wal_floor": floor,
        },
    )


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


def _check_destination(
    ctx: PipelineContext, spark: SparkSession, gw: str, destination: str, table: str
) -> CheckOutcome:
    schema = ctx.tables(gw)[table]
    name = state_table(gw, log_table(schema))
    if not table_exists(spark, name):
        return CheckOutcome(True, "no state table yet", {"rows": 0})
    decl = ctx.destinations(gw)[destination]
    target = ctx.open_destination(decl)
    try:
        target.ensure_table(schema)
        dest_rows = {r["row_id"]: r for r in target.read_back(schema)}
        # A tiered destination holds each row in one tier: its cold rows count, and a row in
        # both tiers differs.
        with cold_tier(ctx, gw, decl, target, schema) as tier:
            cold_rows = [] if tier is None else tier.cold_rows()
        both = sorted(r["row_id"] for r in cold_rows if r["row_id"] in dest_rows)
        dest_rows.update({r["row_id"]: r for r in cold_rows if r["row_id"] not in dest_rows})
    except AdapterError as exc:
        if decl.primary:
            raise
        return CheckOutcome(False, f"{destination} is unreachable: {exc.message}", {})
    finally:
        target.close()
    differ: list[str] = list(both)
    for row in spark.table(name).collect():
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
            if got[col] != state_value(row[col], typ):
                differ.append(row["row_id"])
                break
    return CheckOutcome(
        not differ,
        f"{len(differ)} of the state's rows differ in {destination}.{schema.table}",
        {
            "differ": len(differ),
            "sample": differ[:10],
            "destination_rows": len(dest_rows),
            "in_both_tiers": len(both),
        },
    )
