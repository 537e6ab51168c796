"""Record clean-up as pure functions: source values → JSON values, rows → :class:`Change`."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from collections.abc import Mapping
from typing import Any

from .model import Change

__all__ = ["json_value", "row_change"]


def json_value(value: Any) -> Any:
    """A JSON value for a database or API value: timestamps and dates as ISO 8601 strings,
    decimals as numbers (integral ones as integers), bytes as hex, UUIDs as strings; a float
    that is not finite becomes ``None`` (JSON has no NaN)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return str(value)


def row_change(row: Mapping[Any, Any], row_id_column: str) -> Change:
    """A source row as a :class:`Change`: its id from ``row_id_column`` (as a string), every
    other column as a JSON value."""
    row_id = row[row_id_column]
    return Change(
        str(json_value(row_id)),
        {k: json_value(v) for k, v in row.items() if k != row_id_column},
    )
