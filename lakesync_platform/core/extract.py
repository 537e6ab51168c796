"""Column-level diffs of rows: the reference ``extractDelta`` / ``applyDelta`` (PROTOCOL.md §1.3).

Python has no ``undefined``: a key missing from a mapping plays that role, and ``None`` is JSON
``null`` (a real value). Column order follows JavaScript's own-key order (see
:func:`~lakesync_platform.core.ids.js_key_order`) because it feeds the delta id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta
from .ids import delta_id, js_key_order
from .schema import TableSchema

__all__ = ["apply_delta", "extract_delta", "js_deep_equal", "js_same_value"]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_object(value: Any) -> bool:
    return isinstance(value, Mapping | list | tuple)


def js_same_value(a: Any, b: Any) -> bool:
    """JavaScript ``Object.is`` for JSON-ish values (``NaN`` is itself; ``0`` is not ``-0``).

    Objects and arrays are the same only if they are the same Python object.
    """
    if _is_number(a) and _is_number(b):
        if a != a and b != b:  # both NaN
            return True
        if a == 0 and b == 0:
            return math.copysign(1.0, a) == math.copysign(1.0, b)
        return bool(a == b)
    if _is_object(a) or _is_object(b):
        return a is b
    return type(a) is type(b) and a == b


def js_deep_equal(a: Any, b: Any) -> bool:
    """``fast-deep-equal``: structural equality, key-order-agnostic, ``NaN`` equals ``NaN``.

    Arrays never equal objects; primitives compare as ``===`` (``0 === -0``, ``1 !== "1"``,
    ``true !== 1``).
    """
    if a is b:
        return True
    if isinstance(a, Mapping):
        if not isinstance(b, Mapping) or len(a) != len(b):
            return False
        return all(key in b and js_deep_equal(value, b[key]) for key, value in a.items())
    if isinstance(a, list | tuple):
        if not isinstance(b, list | tuple) or len(a) != len(b):
            return False
        return all(js_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if _is_object(b):
        return False
    if _is_number(a) and _is_number(b):
        return bool(a == b) or (a != a and b != b)
    return type(a) is type(b) and a == b


def _values_equal(before: Any, after: Any) -> bool:
    if js_same_value(before, after):
        return True
    return _is_object(before) and _is_object(after) and js_deep_equal(before, after)


def extract_delta(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    *,
    table: str,
    row_id: str,
    client_id: str,
    hlc: int,
    schema: TableSchema | None = None,
) -> RowDelta | None:
    """The change from ``before`` to ``after`` as a delta, or ``None`` if nothing changed.

    * ``None`` → row: ``INSERT`` with every column of ``after`` (in its key order);
    * row → ``None``: ``DELETE`` with no columns;
    * row → row: ``UPDATE`` with the changed columns only, visiting the keys of ``before`` and
      then the new keys of ``after``; a key missing from ``after`` never produces a column;
      dicts and lists compare structurally.

    With ``schema``, columns outside the schema are ignored.
    """
    allowed = frozenset(schema.column_names) if schema is not None else None
    columns: list[ColumnDelta] = []
    if before is None:
        if after is None:
            return None
        op = INSERT
        columns = [
            ColumnDelta(key, after[key])
            for key in js_key_order(after)
            if allowed is None or key in allowed
        ]
    elif after is None:
        op = DELETE
    else:
        op = UPDATE
        keys = js_key_order(before)
        seen = set(keys)
        keys.extend(key for key in js_key_order(after) if key not in seen)
        for key in keys:
            if (allowed is not None and key not in allowed) or key not in after:
                continue
            value = after[key]
            if key in before and _values_equal(before[key], value):
                continue
            columns.append(ColumnDelta(key, value))
        if not columns:
            return None
    cols = tuple(columns)
    return RowDelta(
        op=op,
        table=table,
        row_id=row_id,
        client_id=client_id,
        columns=cols,
        hlc=hlc,
        delta_id=delta_id(client_id, hlc, table, row_id, cols),
    )


def apply_delta(row: Mapping[str, Any] | None, delta: RowDelta) -> dict[str, Any] | None:
    """The reference ``applyDelta``: ``DELETE`` → ``None``, else a shallow merge onto a copy."""
    if delta.op == DELETE:
        return None
    merged: dict[str, Any] = dict(row) if row is not None else {}
    for col in delta.columns:
        merged[col.column] = col.value
    return merged
