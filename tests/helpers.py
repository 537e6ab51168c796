"""Test helpers: tokens and delta builders on the test secret (the gateway process, the clock
and the demo schema are in :mod:`lakesync_platform.testing`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.wire import delta_to_wire
from lakesync_platform.testing import dev_token

ROOT = Path(__file__).resolve().parents[1]
SECRET = "test-secret-do-not-use"


def token(sub: str, gw: str, role: str = "client", secret: str = SECRET, **claims: Any) -> str:
    """A valid token for ``sub`` on ``gw``."""
    return dev_token(sub, gw, secret, role, **claims)


def make_delta(
    client_id: str,
    hlc: int,
    table: str,
    row_id: str,
    columns: dict[str, Any] | None,
    op: str = "UPDATE",
) -> RowDelta:
    """A delta with a correct content id (``columns=None`` → DELETE)."""
    cols = tuple(ColumnDelta(k, v) for k, v in (columns or {}).items())
    if columns is None:
        op = "DELETE"
    return RowDelta(
        op, table, row_id, client_id, cols, hlc, delta_id(client_id, hlc, table, row_id, cols)
    )


def wire(d: RowDelta) -> dict[str, Any]:
    """A delta's JSON wire form."""
    return delta_to_wire(d)
