"""Helpers shared by pipeline tests: read lake tables back and compare with the WAL."""

from __future__ import annotations

import json
from typing import Any

from lakesync_platform.core.merge import RowState
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.spark.layout import (
    CURSOR_COL,
    DELETE_CLIENT_COL,
    DELETE_HLC_COL,
    LIVE_COL,
    client_col,
    hlc_col,
    synced_columns,
)


def normalise(value: Any, typ: str) -> Any:
    """A state-table value in comparable form (JSON text parsed, numbers as float)."""
    if value is None:
        return None
    if typ == "json":
        return json.loads(value) if isinstance(value, str) else value
    if typ == "number":
        return float(value)
    return value


def expected_state(schema: TableSchema, state: RowState) -> dict[str, Any]:
    """What the state-table row of a WAL row state must hold."""
    out: dict[str, Any] = {
        LIVE_COL: state.live,
        DELETE_HLC_COL: state.delete_hlc or None,
        DELETE_CLIENT_COL: state.delete_client or None,
    }
    for name, typ in synced_columns(schema):
        col = state.columns.get(name)
        value = None if col is None else col.value
        out[name] = float(value) if typ == "number" and value is not None else value
        out[hlc_col(name)] = None if col is None else col.hlc
        out[client_col(name)] = None if col is None else col.client_id
    return out


def actual_state(schema: TableSchema, row: dict[str, Any]) -> dict[str, Any]:
    """A state-table row (as a dict) in the shape of :func:`expected_state`."""
    out = {k: v for k, v in row.items() if k not in ("row_id", CURSOR_COL)}
    for name, typ in synced_columns(schema):
        out[name] = normalise(out[name], typ)
    return out
