"""Materialise: changed state rows → a destination table through the ``Destination`` port.

Each destination table keeps its own watermark (the highest state ``_ls$cursor`` it has
applied), written in the same destination transaction as the rows. A run reads the state rows
whose ``_ls$cursor`` is above it: live rows are upserted, dead rows soft-deleted (or deleted).
Running twice, or after a crash, applies the same rows again: the result is the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..adapters.destination import Destination
from ..core.delta import check_identifier
from ..core.schema import TableSchema
from .layout import CURSOR_COL, LIVE_COL, ensure_state_table, log_table, q, synced_columns

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ColdTier", "MaterialiseResult", "changed_rows", "materialise_table", "watermark_key"]

_BATCH = 50_000
TxT = TypeVar("TxT")
TxC = TypeVar("TxC", contravariant=True)


class ColdTier(Protocol[TxC]):
    """The cold tier of a destination table (:class:`~lakesync_platform.adapters.tiers.SqlTier`):
    rows a run changes are promoted back to the hot table inside its transaction, and released
    from the cold one once it committed — so a changed row lives in the hot tier only."""

    def promote(self, conn: TxC, row_ids: Sequence[str]) -> int:
        """Copy the cold rows among ``row_ids`` that the hot table lacks into it (in ``conn``)."""
        ...

    def release(self) -> int:
        """Delete the promoted rows' cold copies (after the hot commit)."""
        ...


@dataclass(frozen=True, slots=True)
class MaterialiseResult:
    """What one materialise run wrote into one destination table, and from which snapshot of
    the state table."""

    gateway_id: str
    table: str
    destination_table: str
    from_cursor: int
    to_cursor: int
    upserted: int
    deleted: int
    seconds: float
    state_snapshot_id: int | None = None
    """The state table's snapshot the rows were read from (``None``: it had none)."""


def watermark_key(gw: str, schema: TableSchema, dest_table: str) -> str:
    """Key of a destination table's watermark: ``<gw>/<log table>-><destination table>``."""
    return f"{gw}/{log_table(schema)}->{dest_table}"


def changed_rows(state: DataFrame, schema: TableSchema, after: int) -> DataFrame:
    """Pure: state rows changed after cursor ``after`` → ``row_id, <columns>, live, cursor``."""
    from pyspark.sql import functions as F

    cols = [F.col(q(name)) for name, _ in synced_columns(schema)]
    return state.filter(F.col(q(CURSOR_COL)) > F.lit(after)).select(
        F.col("row_id"),
        *cols,
        F.col(q(LIVE_COL)).alias("live"),
        F.col(q(CURSOR_COL)).alias("cursor"),
    )


def _read_arrow(
    catalog: Catalog, gw: str, schema: TableSchema, after: int, ensure: Callable[[], object]
) -> pa.Table:
    """:func:`changed_rows` read by pyiceberg straight into one Arrow table (position deletes
    applied): the whole batch at once, for tests and small reads."""
    import pyarrow as pa

    reader, _ = _read_batches(catalog, gw, schema, after, ensure)
    return pa.Table.from_batches(list(reader), schema=reader.schema)


def _read_batches(
    catalog: Catalog, gw: str, schema: TableSchema, after: int, ensure: Callable[[], object]
) -> tuple[pa.RecordBatchReader, int | None]:
    """:func:`changed_rows` as a stream of Arrow record batches read by pyiceberg, and the
    snapshot it reads: the files are read one after the other, so memory holds a batch, not
    the table (a first load of a large table never holds it on the driver).

    ``ensure`` creates or evolves the state table; it runs only when the table is missing or
    lacks a column of ``schema``."""
    import pyarrow as pa
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.expressions import GreaterThan, Reference
    from pyiceberg.expressions.literals import literal

    names = ["row_id", *[name for name, _ in synced_columns(schema)]]
    try:
        table = catalog.load_table((gw, log_table(schema)))
        present = {field.name for field in table.schema().fields}
    except NoSuchTableError:
        present = set()
    if not {*names, LIVE_COL, CURSOR_COL} <= present:
        ensure()
        table = catalog.load_table((gw, log_table(schema)))
    # The scan reads the current snapshot of the metadata loaded above, with the table's
    # current schema (naming the snapshot would read it with the schema it was written with,
    # without columns added since).
    snapshot_id = table.metadata.current_snapshot_id
    scan = table.scan(
        row_filter=GreaterThan(term=Reference(CURSOR_COL), value=literal(after)),
        selected_fields=(*names, LIVE_COL, CURSOR_COL),
    )
    from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow

    projected = scan.projection()
    target = schema_to_pyarrow(projected)
    fields = (*names, LIVE_COL, CURSOR_COL)
    out_names = [*names, "live", "cursor"]
    picked = [target.field(n) for n in fields]
    out_schema = pa.schema([f.with_name(n) for f, n in zip(picked, out_names, strict=True)])
    tasks = list(scan.plan_files())

    def renamed() -> Iterator[pa.RecordBatch]:
        # One file at a time: pyiceberg 0.12's own batch reader reads every file of the scan
        # at once (a thread per file, each file whole), which holds the table in memory.
        for task in tasks:
            reader = ArrowScan(
                scan.table_metadata, scan.io, projected, scan.row_filter, scan.case_sensitive
            )
            for batch in reader.to_record_batches([task]):
                if batch.num_rows:
                    columns = [
                        batch.column(n).cast(f.type) for n, f in zip(fields, picked, strict=True)
                    ]
                    yield pa.RecordBatch.from_arrays(columns, schema=out_schema)

    return pa.RecordBatchReader.from_batches(out_schema, renamed()), snapshot_id


def _rebatched(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """``batches`` regrouped into tables of about ``rows`` rows (at most ``rows`` plus one
    incoming batch is held): one destination statement per group, however small the lake's
    files are."""
    import pyarrow as pa

    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        held.append(batch)
        count += batch.num_rows
        while count >= rows:
            table = pa.Table.from_batches(held)
            yield table.slice(0, rows)
            rest = table.slice(rows)
            held, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(held)


def materialise_table(
    spark: SparkSession,
    catalog: Catalog,
    gw: str,
    schema: TableSchema,
    destination: Destination[TxT],
    dest_table: str | None = None,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    clock: Callable[[], float] = time.monotonic,
    tier: ColdTier[TxT] | None = None,
) -> MaterialiseResult:
    """Apply the state rows of ``schema`` changed since ``destination``'s watermark.

    ``catalog``: pyiceberg over the session's catalog, which reads the changed rows (any
    warehouse: local disk or object storage) as a stream of batches.
    ``tier``: the table's cold tier (a destination with a ``lifecycle``): changed rows that
    went cold are promoted back first, and released from the cold tier after the commit.
    """
    import pyarrow.compute as pc

    started = clock()
    dest = check_identifier(dest_table or schema.table, "table")
    key = watermark_key(gw, schema, dest)
    mark = destination.watermark(key)
    # One read of one snapshot of the state, streamed: pyiceberg reads the changed rows file by
    # file into Arrow batches of at most _BATCH rows, each applied before the next is read, so
    # the driver holds a batch, not the table. Its top cursor becomes the watermark, in the
    # same destination transaction.
    reader, snapshot_id = _read_batches(
        catalog, gw, schema, mark, lambda: ensure_state_table(spark, gw, schema)
    )
    value_names = ["row_id", *[name for name, _ in synced_columns(schema)]]
    upserted = deleted = 0
    top = mark
    synced_at = now()
    # One destination transaction: the table's DDL (first, as MySQL commits DDL on its own),
    # the rows and the watermark, which fails the whole run if another run moved it meanwhile.
    with destination.transaction() as conn:
        created = destination.ensure_table_in(conn, schema, dest)
        empty: bool | None = None
        for batch in _rebatched(reader, _BATCH):
            if empty is None:
                # A first load into an empty table: rows are inserted as they are, dead ones
                # skipped.
                empty = created or (mark == 0 and destination.is_empty(conn, dest))
            top = max(top, int(pc.max(batch.column("cursor")).as_py()))
            if tier is not None and not empty:
                tier.promote(conn, batch.column("row_id").to_pylist())
            live = batch.filter(pc.equal(batch.column("live"), True)).select(value_names)
            upserted += destination.upsert_arrow(
                conn, schema, live, synced_at, dest, empty_target=empty
            )
            if not empty:
                dead = batch.filter(pc.invert(batch.column("live")))
                ids = dead.column("row_id").to_pylist()
                deleted += destination.delete_rows(conn, schema, ids, synced_at, dest)
        if top != mark:
            destination.set_watermark(conn, key, top, expected=mark)
    if tier is not None:
        tier.release()
    return MaterialiseResult(
        gw, schema.table, dest, mark + 1, top, upserted, deleted, clock() - started, snapshot_id
    )
