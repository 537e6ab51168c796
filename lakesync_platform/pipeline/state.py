"""The state stage: new change-log entries → one Iceberg state table per table (per-column LWW).

:func:`run_state` is the entry point over :func:`lakesync_platform.spark.state.update_state`
for each of the gateway's registered tables; :func:`check_state_matches_log` compares the rows
the latest flush touched with a replay of its log entries, :func:`audit_state_matches_log`
every row with a replay of the whole log (Spark SQL: :mod:`lakesync_platform.spark.checks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..spark.checks import CursorRange, latest_flush_range, state_differences, whole_log_range
from ..spark.layout import log_table, state_table, table_exists
from ..spark.state import StateResult, update_state
from .context import CheckOutcome, PipelineContext

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["audit_state_matches_log", "check_state_matches_log", "run_state"]


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
    """The state rows the latest flush's range touched equal a replay of that range's log
    entries (values, per-column stamps, delete stamp, liveness, cursor).

    The replay is Spark SQL written apart from the state stage's fold
    (:func:`lakesync_platform.spark.checks.state_differences`), so a bug there shows; it reads
    only the range's log entries and state rows.
    """
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive(f"check of the state of {table}", gw):
        return _check_state(ctx, spark, gw, table, latest_flush_range(spark, gw))


def audit_state_matches_log(ctx: PipelineContext, gw: str, table: str) -> CheckOutcome:
    """:func:`check_state_matches_log` over the whole log: every state row equals the replay
    of every log entry of its table (the audit job)."""
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive(f"audit of the state of {table}", gw):
        return _check_state(ctx, spark, gw, table, whole_log_range(spark, gw))


def _check_state(
    ctx: PipelineContext, spark: SparkSession, gw: str, table: str, rng: CursorRange
) -> CheckOutcome:
    schema = ctx.tables(gw)[table]
    if not table_exists(spark, state_table(gw, log_table(schema))):
        return CheckOutcome(True, "no state table yet", {"rows": 0, "range": str(rng)})
    found = state_differences(spark, gw, schema, rng)
    return CheckOutcome(
        found.differ == 0,
        f"{found.rows} state rows touched by {rng} vs replay of {found.entries} log entries: "
        f"{found.differ} differ",
        {
            "range": str(rng),
            "rows": found.rows,
            "log_entries": found.entries,
            "unmerged_entries": found.unmerged,
            "differ": found.differ,
            "sample": found.sample,
            "state_cursor": found.state_cursor,
        },
    )
