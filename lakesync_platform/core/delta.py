"""Row deltas: the unit of change in LakeSync protocol v1 (PROTOCOL.md §1.1).

A :class:`RowDelta` says that ``client_id`` set some columns of one row (``INSERT`` /
``UPDATE``) or deleted it (``DELETE``, no columns) at HLC ``hlc``. ``delta_id`` is the
content hash computed by :func:`lakesync_platform.core.ids.delta_id`.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from .errors import SchemaError

__all__ = [
    "DELETE",
    "IDENTIFIER_RE",
    "INSERT",
    "OPS",
    "UPDATE",
    "ColumnDelta",
    "RowDelta",
    "check_identifier",
]

INSERT: Final = "INSERT"
UPDATE: Final = "UPDATE"
DELETE: Final = "DELETE"
OPS: Final = frozenset((INSERT, UPDATE, DELETE))

IDENTIFIER_RE: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}")
"""Table and column names: safe SQL identifiers (``packages/core/src/validation/identifier.ts``)."""


def check_identifier(name: object, what: str = "identifier") -> str:
    """Return ``name`` if it is a safe SQL identifier, else raise :class:`SchemaError`."""
    if not isinstance(name, str) or IDENTIFIER_RE.fullmatch(name) is None:
        raise SchemaError(
            f'Invalid SQL identifier: "{name}". {what.capitalize()} names must match '
            "^[a-zA-Z_][a-zA-Z0-9_]{0,63}$"
        )
    return name


class ColumnDelta(msgspec.Struct, frozen=True):
    """One column's new value; ``value`` is any JSON value (``None`` for null)."""

    column: str
    value: Any


class RowDelta(msgspec.Struct, frozen=True):
    """A column-level change to one row, stamped with the writer's HLC."""

    op: str
    table: str
    row_id: str
    client_id: str
    columns: tuple[ColumnDelta, ...]
    hlc: int
    delta_id: str

    @property
    def key(self) -> str:
        """The row's key ``table:row_id`` (unambiguous: table names contain no ``:``)."""
        return f"{self.table}:{self.row_id}"
