"""The materialise stage: changed state rows → each declared destination's tables.

:func:`run_materialise` opens each (selected) destination of the gateway through the context
(any :class:`~lakesync_platform.adapters.destination.Destination`) and runs
:func:`lakesync_platform.spark.materialise.materialise_table` for the tables it covers;
:func:`check_destination_matches_state` compares a destination table with the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..spark.layout import (
    LIVE_COL,
    log_table,
    state_table,
    state_value,
    synced_columns,
    table_exists,
)
from ..spark.materialise import MaterialiseResult, materialise_table
from .context import CheckOutcome, PipelineContext

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_destination_matches_state", "run_materialise"]


def run_materialise(
    ctx: PipelineContext,
    gw: str,
    destinations: list[str] | None = None,
    tables: list[str] | None = None,
) -> list[MaterialiseResult]:
    """Write changed state rows to each (selected) destination table, holding the lake's lock."""
    schemas = ctx.tables(gw)
    results: list[MaterialiseResult] = []
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive("materialise", gw):
        for name, dest in ctx.destinations(gw).items():
            if destinations is not None and name not in destinations:
                continue
            destination = ctx.open_destination(dest)
            try:
                for table, schema in schemas.items():
                    if dest.covers(table) and (tables is None or table in tables):
                        results.append(
                            materialise_table(
                                spark, gw, schema, destination, catalog=ctx.iceberg_catalog
                            )
                        )
            finally:
                destination.close()
    return results


def check_destination_matches_state(
    ctx: PipelineContext, gw: str, destination: str, table: str
) -> CheckOutcome:
    """The destination table holds every state row: live rows equal, dead rows deleted."""
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive(f"check of {destination}.{table}", gw):
        return _check_destination(ctx, spark, gw, destination, table)


def _check_destination(
    ctx: PipelineContext, spark: SparkSession, gw: str, destination: str, table: str
) -> CheckOutcome:
    schema = ctx.tables(gw)[table]
    name = state_table(gw, log_table(schema))
    if not table_exists(spark, name):
        return CheckOutcome(True, "no state table yet", {"rows": 0})
    target = ctx.open_destination(ctx.destinations(gw)[destination])
    try:
        target.ensure_table(schema)
        dest_rows = {r["row_id"]: r for r in target.read_back(schema)}
    finally:
        target.close()
    differ: list[str] = []
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
        {"differ": len(differ), "sample": differ[:10], "destination_rows": len(dest_rows)},
    )
