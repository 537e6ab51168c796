"""The ``Destination`` port: where materialise writes a gateway's state tables.

A destination keeps one table per synced table (``row_id``, the schema's columns, ``props``,
``synced_at``, soft-delete ``deleted_at``; ARCHITECTURE.md §6) plus one watermark per table,
written atomically with its rows. Materialise (:func:`lakesync_platform.spark.materialise
.materialise_table`) and its check speak only this protocol, so any store that implements it
plugs in: :class:`~lakesync_platform.adapters.sql.SqlAdapter` does for PostgreSQL, MySQL/MariaDB
and SQLite; a BigQuery destination can, with its own unit of work as ``TxT``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..core.schema import TableSchema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Destination"]

TxT = TypeVar("TxT")


class Destination(Protocol[TxT]):
    """Create and evolve tables from a schema, upsert and soft-delete state rows, read back.

    ``TxT`` is the destination's unit of work (a SQL connection in a transaction for
    :class:`~lakesync_platform.adapters.sql.SqlAdapter`): the rows and the watermark written
    through one :meth:`transaction` commit together or not at all.
    """

    def transaction(self) -> AbstractContextManager[TxT]:
        """One unit of work: committed when the block ends, discarded when it raises."""
        ...

    def watermark(self, key: str) -> int:
        """The last state cursor materialised under ``key`` (0 when none). Read-only."""
        ...

    def ensure_table(self, schema: TableSchema, name: str | None = None) -> str:
        """Create or additively evolve the table of ``schema`` on its own; return its name."""
        ...

    def ensure_table_in(self, conn: TxT, schema: TableSchema, name: str) -> bool:
        """:meth:`ensure_table` inside a unit of work; return whether the table was created."""
        ...

    def is_empty(self, conn: TxT, name: str) -> bool:
        """Whether the table holds no row."""
        ...

    def upsert_arrow(
        self,
        conn: TxT,
        schema: TableSchema,
        rows: pa.Table,
        synced_at: datetime,
        name: str | None = None,
        *,
        empty_target: bool = False,
    ) -> int:
        """Insert or update live rows (columns ``row_id`` then the schema's); return how many.

        ``empty_target``: the caller saw the table empty in this unit of work (a first load).
        """
        ...

    def delete_rows(
        self,
        conn: TxT,
        schema: TableSchema,
        row_ids: Sequence[str],
        synced_at: datetime,
        name: str | None = None,
    ) -> int:
        """Soft-delete (or delete) rows by ``row_id``; return how many were affected."""
        ...

    def set_watermark(self, conn: TxT, key: str, cursor: int, expected: int) -> None:
        """Move ``key`` from ``expected`` to ``cursor``; fail when another run moved it."""
        ...

    def read_back(self, schema: TableSchema, name: str | None = None) -> list[dict[str, Any]]:
        """Every row of the table, synced columns as the lake's state holds them (json decoded,
        booleans as ``bool``, numbers as ``float``), plus ``row_id`` and ``deleted_at``."""
        ...

    def read_back_rows(
        self, schema: TableSchema, row_ids: Sequence[str], name: str | None = None
    ) -> list[dict[str, Any]]:
        """The rows among ``row_ids`` (those the table holds), as :meth:`read_back` reads
        them: a check of what one run changed reads only those rows."""
        ...

    def read_back_batches(
        self, schema: TableSchema, batch_rows: int, name: str | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """:meth:`read_back` in ``row_id`` order, in batches of at most ``batch_rows`` rows, so
        a table of any size is read in bounded memory."""
        ...

    def close(self) -> None:
        """Release the destination's connections."""
        ...
