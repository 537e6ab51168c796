"""Checkpoint reads: which state snapshots make one consistent cut, and their live rows.

A checkpoint at cursor ``C`` must read every table at a snapshot that holds exactly the log's
entries up to ``C`` for that table. A state table's snapshot with watermark ``w`` (the largest
``_ls$cursor`` it holds: the state job merges the log in cursor order) holds exactly the entries
up to any ``C`` with ``w ≤ C < n``, where ``n`` is the table's first log entry after ``w``. So
:func:`plan_checkpoint` takes, per table, the current snapshot and its ``n`` in the change log
(read at the lake watermark's snapshot ``L``: nothing past ``L`` is known), and chooses

    ``C = min(L, min over tables of n - 1)``

— the highest cursor every table's state covers. A table whose current snapshot is past ``C``
(a state run that stopped between tables) is read at the newest older snapshot at or below
``C``, if that one covers ``C``; otherwise the cut is refused with a clear error (run the state
stage). Every table of the log must have a state table (a registered schema).

:func:`live_rows` is the pure transform (a state table → its live rows), :func:`read_rows` the
thin reader that turns them into :class:`~lakesync_platform.core.wal.StoredRow` on the driver,
one partition at a time. :func:`tag_snapshots` / :func:`drop_tag` pin and unpin the snapshots
read with Iceberg tags (snapshot expiry keeps tagged snapshots).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.checkpoint import CHECKPOINT_TAG_PREFIX
from ..core.errors import FlushError
from ..core.merge import ColumnState, RowState
from ..core.schema import TableSchema
from ..core.wal import StoredRow
from .flush import lake_watermark
from .layout import (
    CURSOR_COL,
    DELETE_CLIENT_COL,
    DELETE_HLC_COL,
    LIVE_COL,
    client_col,
    deltas_table,
    hlc_col,
    log_table,
    q,
    state_table,
    state_value,
    synced_columns,
    table_exists,
)
from .snapshots import ancestors, current_snapshot, load_table

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "CheckpointPlan",
    "TablePlan",
    "drop_tag",
    "live_rows",
    "plan_checkpoint",
    "read_rows",
    "tag_snapshots",
    "tagged_cursors",
]

_NO_ENTRY = 1 << 62
"""No log entry of the table after its watermark (up to the lake watermark)."""


@dataclass(frozen=True, slots=True)
class TablePlan:
    """One table of a checkpoint: its schema, its state table, the snapshot to read (``None``:
    the table has no rows at the checkpoint's cursor) and that snapshot's watermark."""

    schema: TableSchema
    table: str
    state_table: str
    snapshot_id: int | None
    watermark: int


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    """A consistent cut: every table's snapshot holds exactly the log up to ``cursor``.
    ``lake_cursor`` is the lake watermark the cut was chosen under (``cursor`` ≤ it)."""

    gateway_id: str
    cursor: int
    lake_cursor: int
    tables: list[TablePlan]


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _watermark(spark: SparkSession, name: str, snapshot_id: int) -> int:
    """The largest ``_ls$cursor`` of state table ``name`` at ``snapshot_id``."""
    row = spark.sql(
        f"SELECT max({q(CURSOR_COL)}) AS m FROM {name} VERSION AS OF {snapshot_id}"
    ).collect()[0]
    return int(row["m"] or 0)


def _next_entries(
    spark: SparkSession, gw: str, log_snapshot: int, upper: int, after: Mapping[str, int]
) -> dict[str, int]:
    """Per table of the log: its first entry after ``after[table]`` (every entry for a table
    ``after`` does not name) and at or below ``upper``, in the log at ``log_snapshot``."""
    known = [
        f"(`table` = {_sql_string(table)} AND `cursor` > {mark})" for table, mark in after.items()
    ]
    others = (
        "`table` NOT IN (" + ", ".join(_sql_string(t) for t in after) + ")" if after else "true"
    )
    where = " OR ".join([*known, others])
    rows = spark.sql(
        f"SELECT `table` AS t, min(`cursor`) AS n FROM {deltas_table(gw)} "
        f"VERSION AS OF {log_snapshot} WHERE `cursor` <= {upper} AND ({where}) GROUP BY `table`"
    ).collect()
    return {str(r["t"]): int(r["n"]) for r in rows}


def plan_checkpoint(
    spark: SparkSession, catalog: Catalog, gw: str, schemas: Mapping[str, TableSchema]
) -> CheckpointPlan:
    """Choose the cursor and the state snapshots of a consistent checkpoint of ``gw``
    (cursor 0: the lake holds nothing yet; ``catalog``: pyiceberg over the session's catalog,
    for the snapshots). Raises :class:`FlushError` when no cut exists."""
    lake = lake_watermark(spark, gw, catalog)
    by_table = {log_table(s): s for s in schemas.values()}
    if lake.snapshot_id is None or lake.cursor == 0:
        return CheckpointPlan(gw, 0, 0, [])
    current: dict[str, tuple[str, int | None, int]] = {}
    for table, schema in by_table.items():
        name = state_table(gw, log_table(schema))
        snap = current_snapshot(catalog, name) if table_exists(spark, name) else None
        if snap is None or snap.int_prop("total-records") == 0:
            current[table] = (name, None, 0)
        else:
            current[table] = (name, snap.snapshot_id, _watermark(spark, name, snap.snapshot_id))
    first_after = _next_entries(
        spark, gw, lake.snapshot_id, lake.cursor, {t: c[2] for t, c in current.items()}
    )
    unknown = sorted(set(first_after) - set(by_table))
    if unknown:
        raise FlushError(
            f"cannot checkpoint {gw}: the log holds tables without a state table "
            f"({', '.join(unknown)}); register their schemas and run the state stage"
        )
    cursor = min([lake.cursor, *(n - 1 for n in first_after.values())])
    tables = []
    for table, (name, snapshot_id, mark) in sorted(current.items()):
        if mark > cursor:
            snapshot_id, mark = _covering_snapshot(
                spark, catalog, gw, lake.snapshot_id, table, name, cursor
            )
        tables.append(TablePlan(by_table[table], table, name, snapshot_id, mark))
    return CheckpointPlan(gw, cursor, lake.cursor, tables)


def _covering_snapshot(
    spark: SparkSession,
    catalog: Catalog,
    gw: str,
    log_snapshot: int,
    table: str,
    name: str,
    cursor: int,
) -> tuple[int | None, int]:
    """The newest older snapshot of state table ``name`` that holds exactly the log up to
    ``cursor`` (``None``: the table has no entry up to ``cursor``)."""
    for snap in ancestors(catalog, name):
        if snap.int_prop("total-records") == 0:
            break
        mark = _watermark(spark, name, snap.snapshot_id)
        if mark <= cursor:
            following = _next_entries(spark, gw, log_snapshot, cursor, {table: mark})
            if table not in following:
                return snap.snapshot_id, mark
            break
    if table not in _next_entries(spark, gw, log_snapshot, cursor, {table: 0}):
        return None, 0
    raise FlushError(
        f"cannot checkpoint {gw}: no snapshot of the state of {table!r} holds exactly the log "
        f"up to cursor {cursor}; run the state stage (it brings every table to one cursor)"
    )


def live_rows(state: DataFrame, schema: TableSchema) -> DataFrame:
    """Pure: a state table → its live rows (``row_id``, values and stamps, delete stamp,
    cursor), ordered by ``row_id``.

    The order is for the clients: a new client inserts a chunk's rows into SQLite tables keyed
    by row id, and inserts in key order append to the B-trees — measured on 100 000 rows, the
    client's inserts took 0.4 s in order against 1.0 s shuffled. (Spark orders strings by their
    UTF-8 bytes, as SQLite's default collation does.)
    """
    from pyspark.sql import functions as F

    cols = ["row_id", CURSOR_COL, DELETE_HLC_COL, DELETE_CLIENT_COL]
    for name, _ in synced_columns(schema):
        cols += [name, hlc_col(name), client_col(name)]
    live = state.filter(F.col(q(LIVE_COL))).select(*(F.col(q(c)) for c in cols))
    return live.orderBy("row_id")


def read_rows(spark: SparkSession, plan: TablePlan) -> Iterator[StoredRow]:
    """The live rows of ``plan``'s table at its snapshot, as row state, one partition at a time
    on the driver."""
    if plan.snapshot_id is None:
        return
    state = spark.read.option("snapshot-id", str(plan.snapshot_id)).table(plan.state_table)
    columns = [(name, typ == "json") for name, typ in synced_columns(plan.schema)]
    table = plan.table
    for r in live_rows(state, plan.schema).toLocalIterator(prefetchPartitions=False):
        row_id, position, delete_hlc, delete_client = r[0], r[1], r[2], r[3]
        cells: dict[str, ColumnState] = {}
        for i, (name, is_json) in enumerate(columns):
            hlc = r[5 + 3 * i]
            if hlc is not None:
                value = r[4 + 3 * i]
                if is_json and value is not None:
                    value = state_value(value, "json")
                cells[name] = ColumnState(value, hlc, r[6 + 3 * i])
        state_row = RowState(cells, delete_hlc or 0, delete_client or "")
        yield StoredRow(f"{table}:{row_id}", table, row_id, state_row, int(position))


def _refs(catalog: Catalog, qualified: str) -> set[str]:
    return {str(name) for name in load_table(catalog, qualified).metadata.refs}


def tag_snapshots(spark: SparkSession, tables: Sequence[TablePlan], tag: str) -> None:
    """Pin each table's snapshot with ``tag`` (replacing a tag of that name), by Iceberg's
    ``ALTER TABLE … CREATE OR REPLACE TAG``."""
    for plan in tables:
        if plan.snapshot_id is None:
            continue
        spark.sql(
            f"ALTER TABLE {plan.state_table} CREATE OR REPLACE TAG {q(tag)} "
            f"AS OF VERSION {int(plan.snapshot_id)}"
        )


def tagged_cursors(spark: SparkSession, catalog: Catalog, qualified: str) -> set[int]:
    """The cursors of the checkpoint tags on a (quoted, qualified) table."""
    if not table_exists(spark, qualified):
        return set()
    found = set()
    for name in _refs(catalog, qualified):
        suffix = name.removeprefix(CHECKPOINT_TAG_PREFIX)
        if suffix != name and suffix.isdigit():
            found.add(int(suffix))
    return found


def drop_tag(spark: SparkSession, catalog: Catalog, qualified: str, tag: str) -> bool:
    """Remove ``tag`` from a (quoted, qualified) table; ``False`` when it had none."""
    if not table_exists(spark, qualified):
        return False
    if tag not in _refs(catalog, qualified):
        return False
    spark.sql(f"ALTER TABLE {qualified} DROP TAG IF EXISTS {q(tag)}")
    return True
