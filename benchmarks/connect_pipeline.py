"""The pipeline end to end on one Spark session — a Spark Connect client or a classic one.

flush → state → materialise → compact → expire → a time-travel query → history, for one fresh
gateway whose WAL gets ``--rounds`` rounds of writes (updates, deletes, a json column), each
round flushed and merged. Every step's wall time is printed; the lake's contents are checked
against the WAL at the end (every entry once in the log, the destination's live rows equal to
the WAL's), so a run that prints its table also passed.

Usage::

    # against a Connect server started over the same data directory (its catalog and warehouse)
    python benchmarks/connect_pipeline.py --remote sc://127.0.0.1:15111 --data-dir /tmp/x/data
    # the same on the classic in-process session
    python benchmarks/connect_pipeline.py --data-dir /tmp/y/data

The server is configured like the classic session (``SparkSettings.spark_conf``), catalog and
warehouse under ``--data-dir``; the WAL is a SQLite file there, which the server reads over JDBC
(so it must see this machine's disk).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.delta import DELETE, ColumnDelta, RowDelta
from lakesync_platform.core.errors import ValidationError
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.schema import parse_table_schema
from lakesync_platform.pipeline.checkpoint import run_checkpoint
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.pipeline.timetravel import LakeReader, QueryRequest
from lakesync_platform.pipeline.upkeep import run_compaction, run_expiry
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.arrow import is_connect
from lakesync_platform.spark.layout import deltas_table
from lakesync_platform.spark.materialise import materialise_table
from lakesync_platform.sync.service import SyncService

T = TypeVar("T")
NOW_MS = 1_767_000_000_000
SCHEMA = parse_table_schema(
    {
        "table": "todos",
        "columns": [
            {"name": "title", "type": "string"},
            {"name": "done", "type": "boolean"},
            {"name": "meta", "type": "json"},
        ],
    }
)


def _timed(figures: dict[str, list[float]], step: str, run: Callable[[], T]) -> T:
    started = time.perf_counter()
    out = run()
    figures.setdefault(step, []).append(time.perf_counter() - started)
    return out


def _push(service: SyncService, gw: str, n: int, rows: int, tick: list[int]) -> None:
    deltas = []
    for i in range(rows):
        tick[0] += 1
        hlc = encode(NOW_MS - 1_000_000 + tick[0], 0)
        row = f"r{(i * 7 + n) % rows}"
        if i % 10 == 3 and n:
            cols: tuple[ColumnDelta, ...] = ()
            op = DELETE
        else:
            cols = (
                ColumnDelta("title", f"round {n} row {i}"),
                ColumnDelta("done", i % 2 == 0),
                ColumnDelta("meta", {"round": n, "i": i}),
            )
            op = "UPDATE"
        deltas.append(
            RowDelta(op, "todos", row, "c", cols, hlc, delta_id("c", hlc, "todos", row, cols))
        )
    service.push(gw, "c", deltas)


def main() -> None:
    """Run the pipeline once per round, then upkeep and the reads; print the timings."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--remote", help="sc://host:port of a Spark Connect server")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--jar-dir", type=Path, default=Path("data/jars"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200)
    args = parser.parse_args()
    data = args.data_dir.resolve()
    gw = "cx_" + uuid.uuid4().hex[:8]
    wal_url = f"sqlite:///{data / f'wal-{gw}.db'}"
    env = {
        **os.environ,
        "LAKESYNC_DATA_DIR": str(data),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_JAR_DIR": str(args.jar_dir.resolve()),
        "LAKESYNC_DEFS_DIR": str(data / "no-defs"),
        "LAKESYNC_SNAPSHOT_RETENTION_SECONDS": "0",
        "LAKESYNC_ORPHAN_AGE_SECONDS": "0",
        "LAKESYNC_COMPACT_MIN_INPUT_FILES": "2",
    }
    settings = PipelineSettings.from_env(env)
    figures: dict[str, list[float]] = {}
    started = time.perf_counter()
    spark: Any
    if args.remote:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(args.remote).getOrCreate()
        ctx = PipelineContext(settings, spark=spark)
    else:
        ctx = PipelineContext(settings)
        spark = ctx.spark
    figures["session"] = [time.perf_counter() - started]
    kind = "connect" if is_connect(spark) else "classic"
    wal = ctx.wal
    wal.save_schema(gw, SCHEMA)
    service = SyncService(wal, clock=lambda: NOW_MS)
    dest = SqlAdapter.connect(f"sqlite:///{data / f'dest-{gw}.db'}")
    tick = [0]
    try:
        for n in range(args.rounds):
            _push(service, gw, n, args.rows, tick)
            _timed(figures, "flush", lambda: run_flush(ctx, gw))
            _timed(figures, "state", lambda: run_state(ctx, gw))
            _timed(
                figures,
                "materialise",
                lambda: materialise_table(
                    spark, ctx.lake_catalog, gw, SCHEMA, dest, rows_catalog=ctx.iceberg_catalog
                ),
            )
        first = ctx.lake_catalog.load_table((gw, "todos")).metadata.snapshots[0]
        compacted = _timed(figures, "compact", lambda: run_compaction(ctx, gw))
        expired = _timed(figures, "expire", lambda: run_expiry(ctx, gw))
        point = _timed(figures, "checkpoint", lambda: run_checkpoint(ctx, gw))
        reader = LakeReader(ctx)
        request = QueryRequest("SELECT count(*) AS n, count_if(`_ls$live`) AS live FROM todos")
        now = _timed(figures, "query", lambda: reader.query(gw, request))
        history = _timed(figures, "history", lambda: reader.history(gw, "todos"))
        try:
            reader.query(gw, QueryRequest("DROP TABLE todos"))
            raise AssertionError("DROP TABLE ran")
        except ValidationError as exc:
            refused = str(exc)
        # The log holds every WAL entry exactly once; the destination equals the WAL's rows.
        log = spark.table(deltas_table(gw))
        total, distinct = log.count(), log.select("cursor").distinct().count()
        assert total == distinct == wal.max_cursor(gw), (total, distinct, wal.max_cursor(gw))
        live = {rid for rid, state in wal.row_states(gw, "todos") if state.live}
        with sqlite3.connect(data / f"dest-{gw}.db") as conn:
            dest_live = {
                r[0] for r in conn.execute("SELECT row_id FROM todos WHERE deleted_at IS NULL")
            }
        assert dest_live == live, (len(dest_live), len(live))
        assert now.rows.to_pylist()[0]["live"] == len(live)
    finally:
        dest.close()
        ctx.close()
    print(f"{kind} session, gateway {gw}: {args.rounds} rounds of {args.rows} writes")
    for step, seconds in figures.items():
        print(f"  {step:<12} median {statistics.median(seconds) * 1000:8.0f} ms  ({len(seconds)}×)")
    for c in compacted:
        print(
            f"  compacted {c.table}: {c.before.data_files} → {c.after.data_files} data files, "
            f"{c.before.delete_files} → {c.after.delete_files} delete files"
        )
    for e in expired:
        print(
            f"  expired {e.table}: {e.snapshots_expired} of {e.snapshots_before} snapshots, "
            f"{e.files_deleted} files deleted, {e.orphans_removed} orphans"
        )
    print(f"  checkpoint at cursor {point.cursor}; refused: {refused}")
    print(
        f"  query now: {now.rows.to_pylist()}; history: {len(history.snapshots)} snapshots "
        f"(the first, {first.snapshot_id}, expired: {history.snapshot(first.snapshot_id) is None})"
    )


if __name__ == "__main__":
    main()
