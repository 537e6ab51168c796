"""Pipeline throughput: flush + state (deltas/s) and materialise into Postgres (rows/s).

For N WAL entries (default 100k and 1M) on one gateway:

* **flush + state** — ``flush_gateway`` (WAL → Iceberg ``lakesync_deltas``) then
  ``update_state`` (``MERGE INTO`` the per-column LWW state table), timed together, beside a
  **plain** Spark job over the same rows: the same JDBC read of the WAL written to Parquet.
  Ratio = ours / plain.
* **materialise** — the state rows into a fresh Postgres table (``materialise_table``: read state,
  COPY into a stage, ``INSERT … ON CONFLICT``), beside a **plain** ``COPY`` of the same rows
  into an equivalent empty table. Ratio = ours / plain.

Usage: ``python benchmarks/bench_pipeline.py [--sizes 100000,1000000] [--pg-url URL]``.
Prints a table and writes ``benchmarks/results/pipeline.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import sqlalchemy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lakesync_platform.adapters.sql import SqlAdapter  # noqa: E402
from lakesync_platform.core.hlc import encode  # noqa: E402
from lakesync_platform.core.schema import parse_table_schema  # noqa: E402
from lakesync_platform.spark.flush import flush_gateway  # noqa: E402
from lakesync_platform.spark.layout import state_table  # noqa: E402
from lakesync_platform.spark.materialise import materialise_table  # noqa: E402
from lakesync_platform.spark.session import SparkSettings, create_spark_session  # noqa: E402
from lakesync_platform.spark.state import update_state  # noqa: E402
from lakesync_platform.spark.wal_source import jdbc_source, read_wal_entries  # noqa: E402
from lakesync_platform.wal.store import WriteAheadLog  # noqa: E402

SCHEMA = parse_table_schema(
    {
        "table": "todos",
        "columns": [
            {"name": "title", "type": "string"},
            {"name": "completed", "type": "boolean"},
            {"name": "priority", "type": "number"},
            {"name": "tags", "type": "json"},
        ],
    }
)
ENCODE = msgspec.json.Encoder().encode
_INSERT = (
    "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op, client_id, hlc, "
    "columns, ingest_ms, size) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
)


def fill_wal(path: Path, gw: str, n: int, rows: int, seed: int = 7) -> str:
    """Create a WAL with ``n`` entries over ``rows`` row ids (10% deletes); return its URL."""
    url = "sqlite:///" + str(path)
    WriteAheadLog.open(url).close()  # create + migrate
    rnd = random.Random(seed)
    base = 1_760_000_000_000
    conn = sqlite3.connect(path)
    batch: list[tuple[Any, ...]] = []
    with conn:
        for cursor in range(1, n + 1):
            row = f"row-{rnd.randrange(rows)}"
            client = f"client-{rnd.randrange(8)}"
            hlc = encode(base + cursor // 4, cursor % 4)
            if rnd.random() < 0.1:
                op, cols = "DELETE", []
            else:
                op = "UPDATE"
                cols = [{"column": "title", "value": f"title {cursor}"}]
                if rnd.random() < 0.5:
                    cols.append({"column": "completed", "value": rnd.random() < 0.5})
                if rnd.random() < 0.5:
                    cols.append({"column": "priority", "value": rnd.randrange(5)})
                if rnd.random() < 0.2:
                    cols.append({"column": "tags", "value": ["a", client]})
            text = ENCODE(cols).decode()
            batch.append(
                (
                    gw,
                    cursor,
                    uuid.uuid4().hex,
                    "todos",
                    row,
                    op,
                    client,
                    hlc,
                    text,
                    base + cursor // 4,
                    60 + len(text),
                )
            )
            if len(batch) == 50_000:
                conn.executemany(_INSERT, batch)
                batch.clear()
        if batch:
            conn.executemany(_INSERT, batch)
        conn.execute(
            "INSERT INTO wal_gateways (gateway_id, last_cursor, appended_bytes, flush_watermark, "
            "flushed_bytes, created_ms) VALUES (?, ?, ?, 0, 0, 0)",
            (gw, n, n * 100),
        )
    conn.close()
    return url


def bench_size(spark: Any, work: Path, n: int, pg_url: str) -> dict[str, Any]:
    """One size: flush + state vs plain Parquet; materialise vs COPY."""
    gw = f"bench_{n}_{uuid.uuid4().hex[:6]}"
    rows = max(1000, n // 10)
    t = time.perf_counter()
    url = fill_wal(work / f"wal_{n}.db", gw, n, rows)
    fill_s = time.perf_counter() - t
    wal = WriteAheadLog.open(url)
    source = jdbc_source(url)
    try:
        t = time.perf_counter()
        plain_out = work / f"plain_{n}.parquet"
        read_wal_entries(spark, source, gw, 0, n).write.mode("overwrite").parquet(str(plain_out))
        plain_s = time.perf_counter() - t

        t = time.perf_counter()
        flushed = flush_gateway(spark, wal, source, gw)
        flush_s = time.perf_counter() - t
        t = time.perf_counter()
        merged = update_state(spark, gw, SCHEMA)
        state_s = time.perf_counter() - t
        assert flushed.entries == n, flushed
    finally:
        wal.close()

    adapter = SqlAdapter.connect(pg_url)
    try:
        adapter.drop_table("todos")
        adapter.drop_table("lakesync_materialise_watermarks")
        t = time.perf_counter()
        result = materialise_table(spark, gw, SCHEMA, adapter)
        mat_s = time.perf_counter() - t
        written = result.upserted + result.deleted
        copy_s, copied = plain_copy(spark, gw, pg_url)
    finally:
        adapter.close()
    ours = flush_s + state_s
    return {
        "entries": n,
        "rows": merged.rows_changed,
        "fill_wal_s": round(fill_s, 2),
        "flush_s": round(flush_s, 2),
        "state_s": round(state_s, 2),
        "flush_state_s": round(ours, 2),
        "flush_state_deltas_per_s": round(n / ours),
        "plain_parquet_s": round(plain_s, 2),
        "flush_state_ratio": round(ours / plain_s, 2),
        "materialise_rows": written,
        "materialise_s": round(mat_s, 2),
        "materialise_rows_per_s": round(written / mat_s),
        "plain_copy_rows": copied,
        "plain_copy_s": round(copy_s, 2),
        "materialise_ratio": round(mat_s / copy_s, 2),
    }


def plain_copy(spark: Any, gw: str, pg_url: str) -> tuple[float, int]:
    """COPY the same live state rows into an empty Postgres table; return (seconds, rows)."""
    cols = ["row_id", "title", "completed", "priority", "tags"]
    data = [
        tuple(r)
        for r in spark.table(state_table(gw, "todos")).filter("`_ls$live`").select(*cols).collect()
    ]
    engine = sqlalchemy.create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS plain_copy")
            conn.exec_driver_sql(
                "CREATE TABLE plain_copy (row_id TEXT PRIMARY KEY, title TEXT, completed BOOLEAN, "
                "priority DOUBLE PRECISION, tags JSONB, props JSONB NOT NULL DEFAULT '{}', "
                "synced_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
        t = time.perf_counter()
        with engine.begin() as conn:
            raw = conn.connection.driver_connection
            with (
                raw.cursor() as cur,
                cur.copy(  # type: ignore[union-attr]
                    f"COPY plain_copy ({', '.join(cols)}) FROM STDIN"
                ) as copy,
            ):
                for row in data:
                    copy.write_row(row)
        seconds = time.perf_counter() - t
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE plain_copy")
    finally:
        engine.dispose()
    return seconds, len(data)


def main() -> None:
    """Run the benchmark and write ``benchmarks/results/pipeline.json``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pipeline.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    db = f"lakesync_bench_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(args.pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
    pg_url = args.pg_url.rsplit("/", 1)[0] + "/" + db
    work = Path(tempfile.mkdtemp(prefix="lakesync-bench-"))
    results: list[dict[str, Any]] = []
    try:
        spark = create_spark_session(
            SparkSettings(data_dir=work / "lake", driver_memory="6g", shuffle_partitions=8)
        )
        bench_size(spark, work, 20_000, pg_url)  # warm-up (JIT, catalog), not reported
        for n in sizes:
            result = bench_size(spark, work, n, pg_url)
            results.append(result)
            print(json.dumps(result), flush=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.dispose()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "results": results,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{'entries':>9} {'flush+state s':>14} {'deltas/s':>9} {'plain s':>8} {'ratio':>6} "
        f"{'mat rows':>9} {'mat s':>6} {'rows/s':>8} {'COPY s':>7} {'ratio':>6}"
    )
    for r in results:
        print(
            f"{r['entries']:>9} {r['flush_state_s']:>14} {r['flush_state_deltas_per_s']:>9} "
            f"{r['plain_parquet_s']:>8} {r['flush_state_ratio']:>6} {r['materialise_rows']:>9} "
            f"{r['materialise_s']:>6} {r['materialise_rows_per_s']:>8} {r['plain_copy_s']:>7} "
            f"{r['materialise_ratio']:>6}"
        )


if __name__ == "__main__":
    main()
