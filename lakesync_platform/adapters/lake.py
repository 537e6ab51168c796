"""The lake as a pull source: a gateway's Iceberg change log read with pyiceberg.

``kind: lake`` serves the rows the pipeline flushed into ``<namespace>.lakesync_deltas`` (one row
per flushed WAL entry: ``delta_id, table, row_id, op, client_id, hlc, columns`` as JSON text, and
more). A row's latest state is the per-column LWW fold of its log entries — the function of the
log the state tables hold — so the source needs no table schema (the state tables keep json
columns as text, telling them from strings needs the schema).

pyiceberg, not Spark: a pull is a small read answered in milliseconds inside the gateway, while a
Spark session takes seconds to start and hundreds of MB of JVM. Each :meth:`LakeSource.deltas_since`
plans one scan (files pruned by the ``hlc`` bound), sorts the matches in Arrow by ``(hlc,
delta_id)`` and keeps ``limit`` (the lake's files are in ingest order, so the limit cannot be
pushed into the scan); it also reads, in one more scan, the log of every row it returns, so the
:meth:`LakeSource.latest_state` calls of the same page read nothing.

The lake is written by the pipeline's flush only: :meth:`LakeSource.insert_deltas` refuses.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..core.delta import ColumnDelta, RowDelta, check_identifier
from ..core.errors import AdapterError
from ..core.merge import RowState, merge_delta

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression

__all__ = ["LAKE_CATALOG", "LakeSource"]

LAKE_CATALOG: Final = "lakesync"
"""The Iceberg catalog's name (the Spark session's: both store it in the catalog database)."""
_LOG: Final = "lakesync_deltas"
_FIELDS: Final = ("delta_id", "table", "row_id", "op", "client_id", "hlc", "columns")


class LakeSource:
    """A gateway namespace's Iceberg change log as a :class:`~.source.DeltaSource`."""

    def __init__(self, catalog: Catalog, namespace: str) -> None:
        self._catalog = catalog
        self._namespace = namespace
        self._lock = threading.Lock()
        self._states: dict[tuple[str, str], dict[str, Any] | None] = {}

    @classmethod
    def connect(cls, catalog_url: str, warehouse: str, namespace: str) -> LakeSource:
        """The log of ``namespace`` in the SQL catalog at ``catalog_url`` (SQLAlchemy URL)."""
        from pyiceberg.catalog.sql import SqlCatalog

        try:
            catalog = SqlCatalog(LAKE_CATALOG, uri=catalog_url, warehouse=warehouse)
        except Exception as exc:  # pyiceberg raises driver and config errors alike
            raise AdapterError(f"Cannot open the lake's catalog: {exc}") from exc
        return cls(catalog, namespace)

    def ensure_delta_log(self) -> None:
        """The flush creates the log; a lake without one yet serves no rows."""

    def insert_deltas(self, deltas: Sequence[RowDelta]) -> int:
        """Refused: the lake is written by the pipeline's flush only."""
        raise AdapterError("The lake's change log is written by the pipeline's flush only")

    def deltas_since(
        self, since: int, tables: Sequence[str] | None = None, limit: int | None = None
    ) -> list[RowDelta]:
        """Deltas with ``hlc > since`` (of ``tables``), by ``(hlc, delta_id)``, at most
        ``limit``; the log of the rows returned is read along (for :meth:`latest_state`)."""
        from pyiceberg.expressions import And, GreaterThan, Reference
        from pyiceberg.expressions.literals import literal

        cond: BooleanExpression = GreaterThan(term=Reference("hlc"), value=literal(since))
        if tables:
            cond = And(cond, _one_of("table", [check_identifier(t, "table") for t in tables]))
        found = self._scan(cond)
        if found is None:
            return []
        found = found.sort_by([("hlc", "ascending"), ("delta_id", "ascending")])
        if limit is not None:
            found = found.slice(0, limit)
        deltas = _deltas(found)
        self._read_states(deltas)
        return deltas

    def latest_state(self, table: str, row_id: str) -> dict[str, Any] | None:
        """The row's columns folded from its log entries; ``None`` when deleted or absent."""
        with self._lock:
            if (table, row_id) in self._states:
                return self._states.pop((table, row_id))
        from pyiceberg.expressions import And

        history = self._scan(And(_one_of("table", [table]), _one_of("row_id", [row_id])))
        return None if history is None else _fold(_deltas(history)).get(row_id)

    def close(self) -> None:
        """Forget what was read ahead."""
        with self._lock:
            self._states.clear()

    def _scan(self, cond: BooleanExpression) -> pa.Table | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            log = self._catalog.load_table((self._namespace, _LOG))
            return log.scan(row_filter=cond, selected_fields=_FIELDS).to_arrow()
        except NoSuchTableError:
            return None
        except Exception as exc:  # a broken catalog or warehouse: the pull fails cleanly
            raise AdapterError(f"Reading the lake's change log failed: {exc}") from exc

    def _read_states(self, deltas: list[RowDelta]) -> None:
        from pyiceberg.expressions import And

        by_table: dict[str, set[str]] = {}
        for d in deltas:
            by_table.setdefault(d.table, set()).add(d.row_id)
        states: dict[tuple[str, str], dict[str, Any] | None] = {}
        for table, ids in by_table.items():
            history = self._scan(And(_one_of("table", [table]), _one_of("row_id", sorted(ids))))
            folded = {} if history is None else _fold(_deltas(history))
            states.update({(table, rid): folded.get(rid) for rid in ids})
        with self._lock:
            self._states = states


def _one_of(column: str, values: Sequence[str]) -> BooleanExpression:
    from pyiceberg.expressions import In, Reference
    from pyiceberg.expressions.literals import literal

    return In(term=Reference(column), values={literal(v) for v in values})


def _deltas(rows: pa.Table) -> list[RowDelta]:
    return [
        RowDelta(
            r["op"],
            r["table"],
            r["row_id"],
            r["client_id"],
            tuple(ColumnDelta(c["column"], c["value"]) for c in json.loads(r["columns"])),
            int(r["hlc"]),
            r["delta_id"],
        )
        for r in rows.to_pylist()
    ]


def _fold(deltas: list[RowDelta]) -> dict[str, dict[str, Any] | None]:
    """Each row's live columns after its deltas (per-column LWW), ``None`` when deleted."""
    states: dict[str, RowState] = {}
    for d in sorted(deltas, key=lambda d: (d.hlc, d.delta_id)):
        states[d.row_id] = merge_delta(states.get(d.row_id), d).state
    return {rid: (s.values() if s.live else None) for rid, s in states.items()}
