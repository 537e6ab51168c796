"""Validating a batch and precomputing what its commit needs, before it queues for the writer.

Everything that does not depend on stored state is done here, on the caller's thread: checks
(ownership, schema, clock drift; a batch is accepted whole or rejected whole), row keys, size
estimates, the JSON of each delta's columns and of the row it creates if the row is new. The
WAL's writer thread, which every push of the process queues for, then only looks up, merges
and writes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..core.delta import DELETE, RowDelta
from ..core.errors import BackpressureError, ClockDriftError, ForbiddenError
from ..core.hlc import MAX_DRIFT_MS, decode
from ..core.schema import check_delta
from ..core.wal import GatewayCounters
from .config import GatewayConfig

__all__ = ["Prepared", "check_backlog", "check_deltas", "estimate_bytes", "prepare"]

_json_encode = msgspec.json.Encoder().encode


@dataclass(slots=True)
class Prepared:
    """Per-delta work done before a push queues for the writer (parallel lists, by index).

    ``new_row_json[i]`` is the stored state of the row delta ``i`` creates if its row does not
    exist yet (``None`` for a DELETE or a write without columns, which never create one).
    ``may_add_columns[i]`` is false when every column of delta ``i`` was already known.
    """

    keys: list[str]
    sizes: list[int]
    columns_json: list[str]
    new_row_json: list[str | None]
    may_add_columns: list[bool]


def estimate_bytes(d: RowDelta) -> int:
    """The reference's delta size estimate (PROTOCOL.md §10.1), for backlog accounting."""
    size = 33 + len(d.delta_id) + 2 * (len(d.table) + len(d.row_id) + len(d.client_id))
    for col in d.columns:
        v = col.value
        if v is None or isinstance(v, bool):
            vb = 4
        elif isinstance(v, int | float):
            vb = 8
        elif isinstance(v, str):
            vb = 2 * len(v)
        else:
            vb = len(msgspec.json.encode(v))
        size += 2 * len(col.column) + vb
    return size


def _check(
    cfg: GatewayConfig, client_id: str, d: RowDelta, now: int, max_hlc: int, any_client_ids: bool
) -> None:
    """Raise if ``d`` may not be accepted (ownership, schema, clock drift)."""
    if not any_client_ids and d.client_id != client_id:
        raise ForbiddenError(f'Delta clientId "{d.client_id}" does not match the push clientId')
    schema = cfg.schemas.get(d.table)
    if schema is not None and d.op != DELETE:
        types = cfg.column_types(d.table)
        for col in d.columns:
            if not _fits(types.get(col.column), col.value):
                # the full check: raises, or accepts the whole delta (e.g. json columns)
                check_delta(schema, d, version=cfg.versions.get(d.table, 1))
                break
    if d.hlc >= max_hlc:
        drift = decode(d.hlc)[0] - now
        raise ClockDriftError(f"Remote clock is {drift}ms ahead (max drift: {MAX_DRIFT_MS}ms)")


def _max_hlc(now: int) -> int:
    """An HLC at or past this is too far ahead of ``now``."""
    return (now + MAX_DRIFT_MS + 1) << 16


def check_deltas(
    cfg: GatewayConfig,
    client_id: str,
    deltas: Sequence[RowDelta],
    now: int,
    *,
    any_client_ids: bool = False,
) -> None:
    """Validate ``deltas`` as :func:`prepare` does, without precomputing anything."""
    max_hlc = _max_hlc(now)
    for d in deltas:
        _check(cfg, client_id, d, now, max_hlc, any_client_ids)


def prepare(
    cfg: GatewayConfig,
    client_id: str,
    deltas: Sequence[RowDelta],
    now: int,
    *,
    any_client_ids: bool,
) -> Prepared:
    """Validate ``deltas`` (ownership, schema, clock drift) and precompute what the writer needs.

    Raises on the first invalid delta; nothing has been written then.
    """
    prep = Prepared([], [], [], [], [])
    max_hlc = _max_hlc(now)
    known = cfg.column_sets
    for d in deltas:
        _check(cfg, client_id, d, now, max_hlc, any_client_ids)
        cols = d.columns
        prep.keys.append(f"{d.table}:{d.row_id}")
        prep.sizes.append(estimate_bytes(d))
        prep.columns_json.append(_json_encode(cols).decode())
        if d.op == DELETE or not cols:
            prep.new_row_json.append(None)
            prep.may_add_columns.append(False)
            continue
        hlc, cid = d.hlc, d.client_id
        row = {c.column: (c.value, hlc, cid) for c in cols}
        # the RowState encoding (core.merge) of a row that holds exactly this write
        prep.new_row_json.append(
            _json_encode({"c": row, "dh": 0, "dc": ""}).decode() if len(row) == len(cols) else None
        )
        table_known = known.get(d.table)
        prep.may_add_columns.append(
            table_known is None or any(c.column not in table_known for c in cols)
        )
    return prep


def check_backlog(counters: GatewayCounters, max_backlog_bytes: int | None) -> None:
    """Raise :class:`BackpressureError` once the unflushed backlog reaches the limit."""
    if max_backlog_bytes is None:
        return
    backlog = counters.appended_bytes - counters.flushed_bytes
    if backlog >= max_backlog_bytes:
        raise BackpressureError(
            f"WAL backlog exceeded ({backlog} >= {max_backlog_bytes} bytes); "
            "retry after the next flush"
        )


def _fits(col_type: str | None, value: Any) -> bool:
    """The common cases of :func:`~lakesync_platform.core.schema.check_delta`, inline; ``False``
    means "not sure" (the caller then runs the full check, which raises or accepts)."""
    if value is None:
        return col_type is not None
    kind = type(value)
    if col_type == "string":
        return kind is str
    if col_type == "number":
        return kind is int or (kind is float and math.isfinite(value))
    if col_type == "boolean":
        return kind is bool
    return False
