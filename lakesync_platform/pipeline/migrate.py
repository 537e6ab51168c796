"""Migrate a destination: copy its tables into another declared destination.

:func:`migrate_destination` reads each table of the source destination (through the
:class:`~lakesync_platform.adapters.destination.Destination` port, any kind) and, in one
transaction per table on the target, creates or evolves the table, upserts every row by
``row_id``, marks the source's soft-deleted rows deleted, and carries the source's materialise
watermark over (compare-and-set): the next materialise run continues into the target from where
the source stood. Running it again writes the same rows and the same watermark, so it is safe to
re-run after a failure or to repeat.

Unknown destinations or tables are a :class:`MigrationError` naming what is known, raised before
anything is written.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..core.errors import AdapterError, ValidationError
from ..core.schema import TableSchema
from ..spark.materialise import watermark_key
from .context import PipelineContext

if TYPE_CHECKING:
    import pyarrow as pa

    from ..adapters.destination import Destination

__all__ = ["MigratedTable", "MigrationError", "MigrationReport", "migrate_destination"]


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
) -> MigrationReport:
    """Copy ``tables`` (default: every table ``source`` receives) from destination ``source``
    to destination ``target`` of gateway ``gw``."""
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
            report.tables.append(_copy(gw, schemas[table], src, dst, synced_at))
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
) -> MigratedTable:
    key = watermark_key(gw, schema, schema.table)
    try:
        rows = src.read_back(schema)
    except AdapterError as exc:
        raise AdapterError(f"cannot read {schema.table!r} from the source: {exc.message}") from exc
    mark = src.watermark(key)
    expected = dst.watermark(key)
    deleted = [r["row_id"] for r in rows if r.get("deleted_at") is not None]
    with dst.transaction() as conn:
        dst.ensure_table_in(conn, schema, schema.table)
        dst.upsert_arrow(conn, schema, _arrow(schema, rows), synced_at)
        if deleted:
            dst.delete_rows(conn, schema, deleted, synced_at)
        dst.set_watermark(conn, key, mark, expected=expected)
    return MigratedTable(schema.table, len(rows), len(deleted), mark)


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
