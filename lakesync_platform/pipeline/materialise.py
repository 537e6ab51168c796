"""The materialise stage: changed state rows → each declared destination's tables.

:func:`run_materialise` routes each table to the (selected) destinations that cover it and runs
:func:`lakesync_platform.spark.materialise.materialise_table` for each pair, through any
:class:`~lakesync_platform.adapters.destination.Destination` the context opens:

* **primary** destinations first — a failure fails the run;
* then **best-effort** ones, each table tried again (tenacity, exponential wait) on an
  :class:`~lakesync_platform.core.errors.AdapterError`; one still failing is reported in the
  run's :class:`MaterialiseRun` and the run goes on.

Each destination table keeps its own compare-and-set watermark, so a best-effort destination
that was down catches up — exactly once — on the next run. Its **lag** is how far its watermark
trails the highest watermark of the primary destinations covering the same table
(:func:`destination_lag`, also an asset check: :func:`check_destination_lag`).
:func:`check_destination_matches_state` compares the destination rows the latest flush changed
with the state, :func:`audit_destination_matches_state` every row, in batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from ..core.errors import AdapterError
from ..core.schema import TableSchema
from ..declarations import DestinationDecl
from ..spark.checks import SAMPLE, CursorRange, latest_flush_range, state_rows, whole_log_range
from ..spark.layout import (
    log_table,
    state_table,
    state_value,
    synced_columns,
    table_exists,
)
from ..spark.materialise import MaterialiseResult, materialise_table, watermark_key
from .context import CheckOutcome, PipelineContext
from .tiering import cold_tier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "AUDIT_BATCH",
    "DestinationFailure",
    "MaterialiseRun",
    "audit_destination_matches_state",
    "check_destination_lag",
    "check_destination_matches_state",
    "destination_lag",
    "run_materialise",
]


@dataclass(frozen=True, slots=True)
class DestinationFailure:
    """A best-effort destination table that could not be written in this run."""

    destination: str
    table: str
    attempts: int
    error: str


@dataclass(frozen=True, slots=True)
class MaterialiseRun:
    """What one materialise run did: ``results`` as ``(destination, result)``, the best-effort
    ``failures``, and each best-effort destination table's ``lag`` behind the primaries (state
    cursors; ``None`` when its watermark could not be read)."""

    results: list[tuple[str, MaterialiseResult]] = field(default_factory=list)
    failures: list[DestinationFailure] = field(default_factory=list)
    lag: dict[tuple[str, str], int | None] = field(default_factory=dict)


def run_materialise(
    ctx: PipelineContext,
    gw: str,
    destinations: list[str] | None = None,
    tables: list[str] | None = None,
) -> MaterialiseRun:
    """Write changed state rows to each (selected) destination table: primaries first (a
    failure raises), then best-effort destinations (retried; failures reported)."""
    schemas = {t: s for t, s in ctx.tables(gw).items() if tables is None or t in tables}
    chosen = {
        n: d
        for n, d in ctx.destinations(gw).items()
        if (destinations is None or n in destinations) and d.role != "cold"
    }
    run = MaterialiseRun()
    ctx.spark  # noqa: B018 — started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive("materialise", gw):
        for name, dest in chosen.items():
            if dest.primary:
                run.results.extend((name, r) for r in _materialise(ctx, gw, dest, schemas))
        for name, dest in chosen.items():
            if not dest.primary:
                _best_effort(ctx, gw, name, dest, schemas, run)
    return run


def _best_effort(
    ctx: PipelineContext,
    gw: str,
    name: str,
    dest: DestinationDecl,
    schemas: dict[str, TableSchema],
    run: MaterialiseRun,
) -> None:
    """Materialise a best-effort destination table by table, retried; failures and lag are
    recorded in ``run``."""
    settings = ctx.settings
    for table, schema in schemas.items():
        if not dest.covers(table):
            continue
        retrying = Retrying(
            retry=retry_if_exception_type(AdapterError),
            stop=stop_after_attempt(settings.best_effort_attempts),
            wait=wait_exponential(multiplier=settings.best_effort_wait_s, max=30),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    done = _materialise(ctx, gw, dest, {table: schema})
                    run.results.extend((name, r) for r in done)
        except AdapterError as exc:
            tries = retrying.statistics.get("attempt_number", settings.best_effort_attempts)
            run.failures.append(DestinationFailure(name, table, tries, exc.message))
        run.lag[(name, table)] = destination_lag(ctx, gw, name, table)


def _materialise(
    ctx: PipelineContext, gw: str, dest: DestinationDecl, schemas: dict[str, TableSchema]
) -> list[MaterialiseResult]:
    destination = ctx.open_destination(dest)
    try:
        done: list[MaterialiseResult] = []
        for table, schema in schemas.items():
            if not dest.covers(table):
                continue
            with cold_tier(ctx, gw, dest, destination, schema) as tier:
                done.append(
                    materialise_table(
                        ctx.spark,
                        ctx.lake_catalog,
                        gw,
                        schema,
                        destination,
                        rows_catalog=ctx.iceberg_catalog,
                        tier=tier,
                    )
                )
        return done
    finally:
        destination.close()


def _watermark(ctx: PipelineContext, gw: str, dest: DestinationDecl, schema: TableSchema) -> int:
    destination = ctx.open_destination(dest)
    try:
        return destination.watermark(watermark_key(gw, schema, schema.table))
    finally:
        destination.close()


def destination_lag(ctx: PipelineContext, gw: str, destination: str, table: str) -> int | None:
    """How many state cursors ``destination``'s table trails the highest watermark of the
    primary destinations covering ``table`` (0 for a primary; ``None`` when a watermark cannot
    be read)."""
    decls = ctx.destinations(gw)
    dest = decls[destination]
    if dest.primary:
        return 0
    schema = ctx.tables(gw)[table]
    try:
        own = _watermark(ctx, gw, dest, schema)
        primary = max(
            (
                _watermark(ctx, gw, d, schema)
                for d in decls.values()
                if d.primary and d.covers(table)
            ),
            default=own,
        )
    except AdapterError:
        return None
    return max(primary - own, 0)


def check_destination_lag(
    ctx: PipelineContext, gw: str, destination: str, table: str
) -> CheckOutcome:
    """A best-effort destination table has caught up with the primary destinations."""
    lag = destination_lag(ctx, gw, destination, table)
    if lag is None:
        return CheckOutcome(
            False, f"{destination}.{table}: a watermark cannot be read", {"lag": "unknown"}
        )
    return CheckOutcome(
        lag == 0, f"{destination}.{table} trails the primary by {lag} state cursors", {"lag": lag}
    )


def check_destination_matches_state(
    ctx: PipelineContext, gw: str, destination: str, table: str
) -> CheckOutcome:
    """The destination table holds the state rows the latest flush's range changed: live rows
    equal, dead rows deleted (only those rows are read, on both sides)."""
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive(f"check of {destination}.{table}", gw):
        return _check_destination(ctx, spark, gw, destination, table, latest_flush_range(spark, gw))


def audit_destination_matches_state(
    ctx: PipelineContext, gw: str, destination: str, table: str
) -> CheckOutcome:
    """:func:`check_destination_matches_state` over every state row, streamed in batches of
    ``AUDIT_BATCH`` rows looked up in the destination (the audit job)."""
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive(f"audit of {destination}.{table}", gw):
        return _check_destination(ctx, spark, gw, destination, table, whole_log_range(spark, gw))


AUDIT_BATCH = 5_000
"""State rows compared with their destination rows at a time."""


def _check_destination(
    ctx: PipelineContext,
    spark: SparkSession,
    gw: str,
    destination: str,
    table: str,
    rng: CursorRange,
) -> CheckOutcome:
    schema = ctx.tables(gw)[table]
    if not table_exists(spark, state_table(gw, log_table(schema))):
        return CheckOutcome(True, "no state table yet", {"rows": 0, "range": str(rng)})
    decl = ctx.destinations(gw)[destination]
    target = ctx.open_destination(decl)
    rows = differ = both = 0
    sample: list[str] = []
    try:
        target.ensure_table(schema)
        # A tiered destination holds each row in one tier: its cold rows count, and a row in
        # both tiers differs.
        with cold_tier(ctx, gw, decl, target, schema) as tier:
            for batch in state_rows(spark, gw, schema, rng, AUDIT_BATCH):
                ids = [r["row_id"] for r in batch]
                hot = {r["row_id"]: r for r in target.read_back_rows(schema, ids)}
                cold = {} if tier is None else {r["row_id"]: r for r in tier.cold_rows_of(ids)}
                rows += len(batch)
                for row in batch:
                    rid = row["row_id"]
                    in_both = rid in hot and rid in cold
                    both += in_both
                    if in_both or not _same_row(schema, row, hot.get(rid, cold.get(rid))):
                        differ += 1
                        if len(sample) < SAMPLE:
                            sample.append(rid)
    except AdapterError as exc:
        if decl.primary:
            raise
        return CheckOutcome(False, f"{destination} is unreachable: {exc.message}", {})
    finally:
        target.close()
    return CheckOutcome(
        differ == 0,
        f"{differ} of the {rows} state rows of {rng} differ in {destination}.{schema.table}",
        {
            "range": str(rng),
            "rows": rows,
            "differ": differ,
            "sample": sorted(sample),
            "in_both_tiers": both,
        },
    )


def _same_row(schema: TableSchema, row: dict[str, Any], got: dict[str, Any] | None) -> bool:
    """Whether destination row ``got`` (as ``read_back`` reads it) shows state row ``row``."""
    gone = got is None or got.get("deleted_at") is not None
    if not row["live"]:
        return gone
    if gone or got is None:
        return False
    return all(got[col] == state_value(row[col], typ) for col, typ in synced_columns(schema))
