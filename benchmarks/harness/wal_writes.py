"""Writes to a benchmark lake's WAL through the gateway's write path, in a child process.

Run as a script with the code version under test first on ``PYTHONPATH``, so each version's WAL
is written by that version's own code (a newer tree may migrate the WAL; an older one must not
see that)::

    PYTHONPATH=TREE python benchmarks/harness/wal_writes.py fill --gw GW --table T --rows N
    PYTHONPATH=TREE python benchmarks/harness/wal_writes.py update --gw GW --table T \\
        --rows N --count 200 --seed S

The data and defs directories come from ``LAKESYNC_DATA_DIR`` / ``LAKESYNC_DEFS_DIR`` (the
declared tables are applied to the WAL's config store first, as a pipeline run does). Every
delta goes through ``SyncService.push`` — validation, dedup, the row table, the log append —
exactly as the gateway's push route does. ``fill`` writes rows ``r0000000`` … one INSERT each
(title, completed, priority, tags); ``update`` changes the title and priority of ``--count``
distinct rows drawn with ``--seed``, each title ``update <seed>-<k>`` (so a destination can be
checked for them). Prints one JSON line: deltas, seconds, the WAL's last cursor.

This file imports only the standard library and the product, through APIs that the commit
before issue 27 (``5ce1425``) already had: it runs against that tree too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Iterator

from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.hlc import HLC
from lakesync_platform.core.ids import delta_id
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.sync.service import SyncService

PUSH_BATCH = 2000
"""Deltas per push (a client's batch)."""
FILL_CLIENT_ROWS = 50_000
"""Rows each filler client writes (client ids ``filler-0`` …)."""


def row_id(i: int) -> str:
    """The id of row ``i`` of the benchmark table."""
    return f"r{i:07d}"


def wall_ms() -> int:
    """The wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def _delta(
    op: str, table: str, row: str, client: str, cols: tuple[ColumnDelta, ...], hlc: int
) -> RowDelta:
    return RowDelta(op, table, row, client, cols, hlc, delta_id(client, hlc, table, row, cols))


def fill_batches(table: str, rows: int) -> Iterator[tuple[str, list[RowDelta]]]:
    """``(client_id, deltas)`` batches inserting rows ``0 .. rows - 1``."""
    rnd = random.Random(7)
    clock = HLC(wall_ms)
    batch: list[RowDelta] = []
    client = "filler-0"
    for i in range(rows):
        if i % FILL_CLIENT_ROWS == 0 and batch:
            yield client, batch
            batch = []
        client = f"filler-{i // FILL_CLIENT_ROWS}"
        cols = (
            ColumnDelta("title", f"todo {i}"),
            ColumnDelta("completed", rnd.random() < 0.3),
            ColumnDelta("priority", rnd.randrange(5)),
            ColumnDelta("tags", ["bench", f"t{i % 17}"]),
        )
        batch.append(_delta("INSERT", table, row_id(i), client, cols, clock.now()))
        if len(batch) == PUSH_BATCH:
            yield client, batch
            batch = []
    if batch:
        yield client, batch


def update_batch(table: str, rows: int, count: int, seed: int) -> list[RowDelta]:
    """``count`` updates of distinct existing rows (drawn with ``seed``) by client ``editor``."""
    rnd = random.Random(seed)
    clock = HLC(wall_ms)
    picked = rnd.sample(range(rows), min(count, rows))
    return [
        _delta(
            "UPDATE",
            table,
            row_id(i),
            "editor",
            (ColumnDelta("title", f"update {seed}-{k}"), ColumnDelta("priority", k % 5)),
            clock.now(),
        )
        for k, i in enumerate(picked)
    ]


def main() -> None:
    """Parse the command line, write, print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["fill", "update"])
    parser.add_argument("--gw", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ctx = PipelineContext(PipelineSettings.from_env(os.environ))
    try:
        ctx.apply_declarations(wall_ms())
        svc = SyncService(ctx.wal, wall_ms)
        started = time.perf_counter()
        n = 0
        if args.what == "fill":
            batches = fill_batches(args.table, args.rows)
        else:
            batches = iter([("editor", update_batch(args.table, args.rows, args.count, args.seed))])
        for client, deltas in batches:
            for i in range(0, len(deltas), PUSH_BATCH):
                part = deltas[i : i + PUSH_BATCH]
                n += len(svc.push(args.gw, client, part).entries)
        seconds = time.perf_counter() - started
        out = {"deltas": n, "seconds": round(seconds, 3), "cursor": ctx.wal.max_cursor(args.gw)}
    finally:
        ctx.close()
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
