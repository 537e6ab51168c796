"""The client benchmarks' data: gateway ``bench``, table ``items`` and rows pushed into a WAL
by four other clients (``bench_client``, ``bench_checkpoint``)."""

from __future__ import annotations

import time
from typing import Any

from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.schema import parse_table_schema
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

GW = "bench"
SCHEMA: dict[str, Any] = {
    "table": "items",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "qty", "type": "number"},
        {"name": "done", "type": "boolean"},
        {"name": "tags", "type": "json"},
    ],
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def seed(wal: WriteAheadLog, rows: int, *, register_schema: bool = False) -> None:
    """``rows`` rows of ``items`` pushed by four writers through the server's write path
    (``register_schema``: the table's schema saved first, as the pipeline needs it)."""
    service = SyncService(wal, now_ms)
    if register_schema:
        service.save_schema(GW, parse_table_schema(SCHEMA))
    base = encode(now_ms() - 60_000, 0)
    batch: list[RowDelta] = []
    for i in range(rows):
        cols = (
            ColumnDelta("title", f"item {i}"),
            ColumnDelta("qty", i),
            ColumnDelta("done", i % 2 == 0),
            ColumnDelta("tags", ["x", i % 7]),
        )
        client, hlc, row_id = f"seeder{i % 4}", base + i, f"row{i:07}"
        batch.append(
            RowDelta(
                "INSERT",
                "items",
                row_id,
                client,
                cols,
                hlc,
                delta_id(client, hlc, "items", row_id, cols),
            )
        )
        if len(batch) == 5000 or i == rows - 1:
            for c in sorted({d.client_id for d in batch}):
                service.push(GW, c, [d for d in batch if d.client_id == c])
            batch.clear()
