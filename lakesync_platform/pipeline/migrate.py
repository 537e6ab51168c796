"""Migrate a destination: copy its tables into another declared destination.

:func:`migrate_destination` copies each table of the source destination (through the
:class:`~lakesync_platform.adapters.destination.Destination` port, any kind) in bounded
memory: it reads the source's materialise watermark first, creates or evolves the target table,
then streams the rows in ``row_id`` order, ``batch_rows`` at a time
(:meth:`~lakesync_platform.adapters.destination.Destination.read_back_batches`), each batch
upserted by ``row_id`` — the source's soft-deleted rows marked deleted — in one transaction on
the target, and last carries the watermark over (compare-and-set): the next materialise run
continues into the target from where the source stood. The watermark is read before the rows,
so what a materialise run writes into the source meanwhile is applied again by the target's
next run, never skipped; it moves only once every row is in, so a run that fails midway leaves
the target's watermark where it was, and running it again writes the same rows and the same
watermark: safe to re-run after a failure or to repeat.

Unknown destinations or tables are a :class:`MigrationError` naming what is known, raised before
anything is written. Progress: ``step`` around each table (``lakesync migrate`` prints it as
``lakesync run`` prints its stages) and ``on_rows(table, rows copied so far)`` after each batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..core.errors import AdapterError, ValidationError
from ..core.schema import TableSchema
from ..spark.materialise import watermark_key
from .context import PipelineContext
from .progress import Step, quiet_step

if TYPE_CHECKING:
    import pyarrow as pa

    from ..adapters.destination import Destination

__all__ = [
    "BATCH_ROWS",
    "MigratedTable",
    "MigrationError",
    "MigrationReport",
    "migrate_destination",
]

BATCH_ROWS = 10_000
"""Rows read, converted and written at a time (one transaction on the target each)."""


class MigrationError(ValidationError):
    """A migration names a destination or table the declarations do not know."""


@dataclass(frozen=True, slots=True)
class MigratedTable:
    """One table copied: rows written, of them soft-deleted, and the watermark carried over."""

    table: str
    rows: int
    deleted: int
    watermark: int


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What a migration copied, from which destination to which, for one gateway."""

    gateway_id: str
    source: str
    target: str
    tables: list[MigratedTable] = field(default_factory=list)

    def summary(self) -> str:
        """One line: ``migrated 3 rows (1 deleted) in 2 tables from a to b (gateway g)``."""
        rows = sum(t.rows for t in self.tables)
        deleted = sum(t.deleted for t in self.tables)
        return (
            f"migrated {rows} rows ({deleted} deleted) in {len(self.tables)} tables "
            f"from {self.source} to {self.target} (gateway {self.gateway_id})"
        )

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return asdict(self)


def migrate_destination(
    ctx: PipelineContext,
    gw: str,
    source: str,
    target: str,
    tables: list[str] | None = None,
    *,
    now: datetime | None = None,
    batch_rows: int = BATCH_ROWS,
    step: Step = quiet_step,
    on_rows: Callable[[str, int], None] | None = None,
) -> MigrationReport:
    """Copy ``tables`` (default: every table ``source`` receives) from destination ``source``
    to destination ``target`` of gateway ``gw``, ``batch_rows`` rows at a time."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    declared = ctx.destinations(gw)
    for name in (source, target):
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise MigrationError(f"unknown destination {name!r} of gateway {gw!r} (known: {known})")
    if source == target:
        raise MigrationError("--from and --to name the same destination")
    schemas = ctx.tables(gw)
    covered = [t for t in schemas if declared[source].covers(t)]
    chosen = covered if tables is None else tables
    for table in chosen:
        if table not in covered:
            raise MigrationError(
                f"unknown table {table!r} for destination {source!r} "
                f"(known: {', '.join(covered) or 'none'})"
            )
    synced_at = now or datetime.now(UTC)
    src = ctx.open_destination(declared[source])
    dst = ctx.open_destination(declared[target])
    report = MigrationReport(gw, source, target)
    try:
        for table in chosen:
            with step(f"migrate {table} ({source} → {target})"):
                copied = _copy(gw, schemas[table], src, dst, synced_at, batch_rows, on_rows)
            report.tables.append(copied)
    finally:
        src.close()
        dst.close()
    return report


def _copy(
    gw: str,
    schema: TableSchema,
    src: Destination[Any],
    dst: Destination[Any],
    synced_at: datetime,
    batch_rows: int,
    on_rows: Callable[[str, int], None] | None,
) -> MigratedTable:
    key = watermark_key(gw, schema, schema.table)
    mark = src.watermark(key)  # before the rows (see the module docstring)
    expected = dst.watermark(key)
    with dst.transaction() as conn:
        dst.ensure_table_in(conn, schema, schema.table)
    rows = deleted = 0
    batches = src.read_back_batches(schema, batch_rows)
    while True:
        try:
            batch = next(batches, None)
        except AdapterError as exc:
            raise AdapterError(
                f"cannot read {schema.table!r} from the source: {exc.message}"
            ) from exc
        if batch is None:
            break
        gone = [r["row_id"] for r in batch if r.get("deleted_at") is not None]
        with dst.transaction() as conn:
            dst.upsert_arrow(conn, schema, _arrow(schema, batch), synced_at)
            if gone:
                dst.delete_rows(conn, schema, gone, synced_at)
        rows, deleted = rows + len(batch), deleted + len(gone)
        if on_rows is not None:
            on_rows(schema.table, rows)
    with dst.transaction() as conn:
        dst.set_watermark(conn, key, mark, expected=expected)
    return MigratedTable(schema.table, rows, deleted, mark)


def _arrow(schema: TableSchema, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows as materialise writes them: ``row_id``, then each column (json as JSON text)."""
    import pyarrow as pa

    types = {"string": pa.string(), "number": pa.float64(), "boolean": pa.bool_()}
    columns = [c for c in schema.columns if c.name != "row_id"]
    data: dict[str, pa.Array] = {"row_id": pa.array([r["row_id"] for r in rows], pa.string())}
    for col in columns:
        values = [r.get(col.name) for r in rows]
        if col.type == "json":
            values = [None if v is None else json.dumps(v) for v in values]
        data[col.name] = pa.array(values, types.get(col.type, pa.string()))
    return pa.table(data)
