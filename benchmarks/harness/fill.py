"""Filling a benchmark WAL before a measurement, without HTTP.

:func:`fill_service` pushes through ``SyncService.push`` in-process (exactly the server's write
path); :func:`copy_sqlite_to_pg` bulk-copies a filled SQLite WAL into Postgres.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.schema import parse_table_schema
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal import tables as t
from lakesync_platform.wal.store import WriteAheadLog

from .backends import SqliteBackend, libpq_url
from .corpus import GW, ORDERS, wall_ms


def wal_cursor(url: str) -> int:
    """How many deltas the benchmark gateway's WAL at ``url`` holds (its last cursor)."""
    wal = WriteAheadLog.open(url, now_ms=wall_ms())
    try:
        return wal.max_cursor(GW)
    finally:
        wal.close()


def fill_service(url: str, chunks: Iterator[list[RowDelta]], batch: int = 2000) -> dict[str, Any]:
    """Push every chunk in-process through ``SyncService.push`` (the server's write path)."""
    wal = WriteAheadLog.open(url, now_ms=wall_ms())
    try:
        svc = SyncService(wal, wall_ms)
        svc.save_schema(GW, parse_table_schema(ORDERS))
        t0 = time.perf_counter()
        n = 0
        for deltas in chunks:
            for i in range(0, len(deltas), batch):
                part = deltas[i : i + batch]
                svc.push(GW, part[0].client_id, part)
                n += len(part)
        el = time.perf_counter() - t0
        return {
            "deltas": n,
            "seconds": round(el, 1),
            "deltas_per_s": round(n / el, 1),
            "cursor": wal.max_cursor(GW),
        }
    finally:
        wal.close()


def copy_sqlite_to_pg(sqlite_url: str, pg_url: str) -> dict[str, Any]:
    """Copy every WAL table of a SQLite WAL into a (migrated, empty) Postgres WAL with COPY."""
    import psycopg

    WriteAheadLog.open(pg_url, now_ms=wall_ms()).close()  # migrate
    t0 = time.perf_counter()
    counts = {}
    src = sqlite3.connect(SqliteBackend.path(sqlite_url))
    try:
        with psycopg.connect(libpq_url(pg_url)) as dst:
            for table in t.metadata.sorted_tables:
                if table.name == t.schema_version.name:
                    continue
                cols = [c.name for c in table.columns]
                qcols = ", ".join(f'"{c}"' for c in cols)
                dst.execute(f'TRUNCATE "{table.name}"')
                n = 0
                with dst.cursor().copy(f'COPY "{table.name}" ({qcols}) FROM STDIN') as cp:
                    for row in src.execute(f'SELECT {qcols} FROM "{table.name}"'):
                        cp.write_row(row)
                        n += 1
                counts[table.name] = n
            dst.commit()
    finally:
        src.close()
    return {"rows": counts, "seconds": round(time.perf_counter() - t0, 1)}
