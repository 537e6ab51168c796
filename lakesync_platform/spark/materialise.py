"""Materialise: changed state rows → a destination table through the ``Destination`` port.

Each destination table keeps its own watermark (the highest state ``_ls$cursor`` it has
applied), written in the same destination transaction as the rows. A run reads the state rows
whose ``_ls$cursor`` is above it: live rows are upserted, dead rows soft-deleted (or deleted).
Running twice, or after a crash, applies the same rows again: the result is the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..adapters.destination import Destination
from ..core.delta import check_identifier
from ..core.schema import TableSchema
from .arrow import collect_arrow
from .layout import CURSOR_COL, LIVE_COL, ensure_state_table, log_table, q, synced_columns
from .snapshots import current_snapshot

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
    """:func:`changed_rows` read by pyiceberg straight into Arrow (position deletes applied)."""
    return _read_arrow_at(catalog, gw, schema, after, ensure)[0]


def _read_arrow_at(
    catalog: Catalog, gw: str, schema: TableSchema, after: int, ensure: Callable[[], object]
) -> tuple[pa.Table, int | None]:
    """:func:`_read_arrow`, and the snapshot it read.

    ``ensure`` creates or evolves the state table; it runs only when the table is missing or
    lacks a column of ``schema``."""
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
    rows = scan.to_arrow()
    renamed = rows.select([*names, LIVE_COL, CURSOR_COL])
    return renamed.rename_columns([*names, "live", "cursor"]), snapshot_id


def materialise_table(
    spark: SparkSession,
    catalog: Catalog,
    gw: str,
    schema: TableSchema,
    destination: Destination[TxT],
    dest_table: str | None = None,
    *,
    rows_catalog: Catalog | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    clock: Callable[[], float] = time.monotonic,
    tier: ColdTier[TxT] | None = None,
) -> MaterialiseResult:
    """Apply the state rows of ``schema`` changed since ``destination``'s watermark.

    ``catalog``: pyiceberg over the session's catalog (the state table's current snapshot);
    ``rows_catalog``: a pyiceberg catalog the driver reads the rows with itself (see
    ``local_pyiceberg_catalog``; else Spark reads them).
    ``tier``: the table's cold tier (a destination with a ``lifecycle``): changed rows that
    went cold are promoted back first, and released from the cold tier after the commit.
    """
    import pyarrow.compute as pc

    started = clock()
    dest = check_identifier(dest_table or schema.table, "table")
    key = watermark_key(gw, schema, dest)
    mark = destination.watermark(key)
    # One read of one snapshot of the state: the batch and its top cursor agree. The rows end
    # up on the driver either way, so where the driver can read the lake itself (``catalog``,
    # see ``local_pyiceberg_catalog``) pyiceberg reads them, without a Spark job's fixed cost.
    if rows_catalog is not None:
        changed, snapshot_id = _read_arrow_at(
            rows_catalog, gw, schema, mark, lambda: ensure_state_table(spark, gw, schema)
        )
    else:
        # The current snapshot, read with the current schema (a snapshot named by id is read
        # with the schema it was written with); the stage holds the lake's lock, so nothing
        # commits between the two.
        name = ensure_state_table(spark, gw, schema)
        current = current_snapshot(catalog, name)
        snapshot_id = None if current is None else current.snapshot_id
        changed = collect_arrow(changed_rows(spark.table(name), schema, mark))
    value_names = ["row_id", *[name for name, _ in synced_columns(schema)]]
    upserted = deleted = 0
    top = mark
    synced_at = now()
    # One destination transaction: the table's DDL (first, as MySQL commits DDL on its own),
    # the rows and the watermark, which fails the whole run if another run moved it meanwhile.
    with destination.transaction() as conn:
        created = destination.ensure_table_in(conn, schema, dest)
        if changed.num_rows:
            top = int(pc.max(changed.column("cursor")).as_py())
            # A first load into an empty table: rows are inserted as they are, dead ones skipped.
            empty = created or (mark == 0 and destination.is_empty(conn, dest))
            for offset in range(0, changed.num_rows, _BATCH):
                batch = changed.slice(offset, _BATCH)
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
            destination.set_watermark(conn, key, top, expected=mark)
    if tier is not None:
        tier.release()
    return MaterialiseResult(
        gw, schema.table, dest, mark + 1, top, upserted, deleted, clock() - started, snapshot_id
    )
