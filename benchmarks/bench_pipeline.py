"""Pipeline throughput: flush + state (deltas/s) and materialise into Postgres (rows/s).

For N WAL entries (default 100k and 1M) over N/10 rows on one gateway, each round measures:

* **flush + state** — ``flush_gateway`` (WAL → Iceberg ``lakesync_deltas``) then
  ``update_state`` (per-column LWW fold into the state table; a first load), timed together,
  beside a **plain** Spark job over the same rows: the same JDBC read of the WAL written to
  Parquet. Ratio = ours / plain.
* **materialise** — the state rows into a fresh Postgres table (``materialise_table`` as the
  pipeline runs it: the changed rows read by pyiceberg into Arrow, then COPY; a first load),
  beside a **plain** ``COPY`` of the same live rows, already in memory, into an equivalent empty
  table. Ratio = ours / plain.
* **incremental** (no target, for the record) — N/10 more entries over the same rows, then flush,
  state (``MERGE INTO``) and materialise (COPY into a stage, ``INSERT … ON CONFLICT``, soft
  deletes) again.
* **object storage** — flush + state of the same N entries with the warehouse in a bucket of a
  local S3 server (moto's, on loopback), beside the local-disk figure of the same run: once with
  the catalog's I/O through Iceberg's ``S3FileIO`` (what the pipeline uses) and once through
  Hadoop's S3A (``HadoopFileIO``), for the record. Spark allows one session per process, so each
  runs in a child process of this one (``--object-store-run``) with the same protocol: a warm-up
  round, then ``--repeat`` rounds per size; medians of flush + state seconds, and ratio = S3 /
  local disk.

Protocol: the JVM is warmed up first with one full round at 100k (JIT-compiled code paths; its
figures are kept in the JSON as ``cold_round`` — a fresh JVM is markedly slower), then each size
runs ``--repeat`` rounds (default 3); the flush + state and the materialise figures each come
from the round with that metric's median ratio; all rounds are in the JSON. Each timed section
also records the CPU other processes used meanwhile (``other_cpu_s``, from /proc/stat: the
machine has 2 cores; Postgres counts as other).

The lake is written through the fork-free local filesystem when set-up could build it
(``lake_filesystem`` in the JSON); ``--hadoop-local-fs`` measures Hadoop's default instead.
The plain Parquet write always uses the session's default filesystem.

Usage: ``python benchmarks/bench_pipeline.py [--sizes 100000,1000000] [--repeat 3] [--pg-url URL]
[--hadoop-local-fs] [--no-object-store]``.
Prints a table and writes ``benchmarks/results/pipeline.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import sqlalchemy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.backends import PostgresBackend
from benchmarks.harness.cpu import host_cpu, process_cpu, spark_jvm_pid
from benchmarks.harness.output import RESULTS, write_json
from benchmarks.harness.stats import median_item
from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.hlc import encode
from lakesync_platform.settings import ObjectStoreSettings
from lakesync_platform.spark.flush import flush_gateway
from lakesync_platform.spark.layout import state_table
from lakesync_platform.spark.materialise import materialise_table
from lakesync_platform.spark.session import (
    S3Access,
    SparkSettings,
    create_spark_session,
    local_pyiceberg_catalog,
)
from lakesync_platform.spark.session_catalog import session_catalog
from lakesync_platform.spark.state import update_state
from lakesync_platform.spark.wal_source import jdbc_source, read_wal_entries
from lakesync_platform.testing import S3Server, demo_todos_schema
from lakesync_platform.wal.store import WriteAheadLog

SCHEMA = demo_todos_schema()
ENCODE = msgspec.json.Encoder().encode
_INSERT = (
    "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op, client_id, hlc, "
    "columns, ingest_ms, size) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
)


def fill_wal(path: Path, gw: str, n: int, rows: int, seed: int = 7, start: int = 0) -> str:
    """Write ``n`` WAL entries over ``rows`` row ids (10% deletes) after cursor ``start``
    (creating the WAL when ``start`` is 0); return its URL."""
    url = "sqlite:///" + str(path)
    if start == 0:
        WriteAheadLog.open(url).close()  # create + migrate
    rnd = random.Random(seed + start)
    base = 1_760_000_000_000
    conn = sqlite3.connect(path)
    batch: list[tuple[Any, ...]] = []
    with conn:
        for cursor in range(start + 1, start + n + 1):
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
        if start == 0:
            conn.execute(
                "INSERT INTO wal_gateways (gateway_id, last_cursor, appended_bytes, "
                "flush_watermark, flushed_bytes, created_ms) VALUES (?, ?, ?, 0, 0, 0)",
                (gw, n, n * 100),
            )
        else:
            conn.execute(
                "UPDATE wal_gateways SET last_cursor = ?, appended_bytes = appended_bytes + ? "
                "WHERE gateway_id = ?",
                (start + n, n * 100, gw),
            )
    conn.close()
    return url


_MATERIALISE_KEYS = (
    "materialise_s",
    "materialise_other_cpu_s",
    "materialise_rows",
    "materialise_rows_per_s",
    "plain_copy_s",
    "plain_copy_other_cpu_s",
    "materialise_ratio",
)


class Meter:
    """Wall time of a section and the CPU other processes used meanwhile (/proc/stat)."""

    def __init__(self, spark: Any) -> None:
        self.jvm_pid = spark_jvm_pid(spark)

    @staticmethod
    def _host_busy() -> float:
        busy, steal = host_cpu()
        return busy + steal

    def _own(self) -> float:
        me = os.times()
        jvm = process_cpu(self.jvm_pid) if self.jvm_pid is not None else 0.0
        return jvm + me.user + me.system

    @contextmanager
    def section(self, into: dict[str, Any], name: str) -> Iterator[None]:
        """Time the block into ``into[name + '_s']`` and ``into[name + '_other_cpu_s']``."""
        host, own, t = self._host_busy(), self._own(), time.perf_counter()
        yield
        into[f"{name}_s"] = round(time.perf_counter() - t, 3)
        other = (self._host_busy() - host) - (self._own() - own)
        into[f"{name}_other_cpu_s"] = round(max(other, 0.0), 2)


def bench_round(
    spark: Any, meter: Meter, work: Path, n: int, pg_url: str, catalog: Any
) -> dict[str, Any]:
    """One round at size ``n``: flush + state vs plain Parquet; materialise vs COPY; then an
    incremental batch of ``n / 10`` entries."""
    gw = f"bench_{n}_{uuid.uuid4().hex[:6]}"
    rows = max(1000, n // 10)
    path = work / f"wal_{gw}.db"
    r: dict[str, Any] = {"entries": n}
    lake = session_catalog(spark)  # the snapshot metadata; ``catalog`` reads the rows (or None)
    with meter.section(r, "fill_wal"):
        url = fill_wal(path, gw, n, rows)
    wal = WriteAheadLog.open(url)
    source = jdbc_source(url)
    adapter = SqlAdapter.connect(pg_url)
    try:
        plain_out = work / f"plain_{gw}.parquet"
        with meter.section(r, "plain_parquet"):
            read_wal_entries(spark, source, gw, 0, n).write.parquet(str(plain_out))
        with meter.section(r, "flush"):
            flushed = flush_gateway(spark, lake, wal, source, gw)
        with meter.section(r, "state"):
            merged = update_state(spark, lake, gw, SCHEMA)
        assert flushed.entries == n, flushed
        ours = r["flush_s"] + r["state_s"]
        r["rows"] = merged.rows_changed
        r["flush_state_s"] = round(ours, 3)
        r["flush_state_deltas_per_s"] = round(n / ours)
        r["flush_state_ratio"] = round(ours / r["plain_parquet_s"], 2)

        adapter.drop_table("todos")
        adapter.drop_table("lakesync_materialise_watermarks")
        with meter.section(r, "materialise"):
            result = materialise_table(spark, lake, gw, SCHEMA, adapter, rows_catalog=catalog)
        r["materialise_rows"] = result.upserted + result.deleted
        copied = plain_copy(spark, gw, pg_url, meter, r)
        assert copied == result.upserted, (copied, result)
        r["materialise_rows_per_s"] = round(r["materialise_rows"] / r["materialise_s"])
        r["materialise_ratio"] = round(r["materialise_s"] / r["plain_copy_s"], 2)

        more = n // 10
        fill_wal(path, gw, more, rows, start=n)
        inc: dict[str, Any] = {"entries": more}
        with meter.section(inc, "flush"):
            flush_gateway(spark, lake, wal, source, gw)
        with meter.section(inc, "state"):
            changed = update_state(spark, lake, gw, SCHEMA)
        with meter.section(inc, "materialise"):
            again = materialise_table(spark, lake, gw, SCHEMA, adapter, rows_catalog=catalog)
        inc["rows_changed"] = changed.rows_changed
        inc["flush_state_deltas_per_s"] = round(more / (inc["flush_s"] + inc["state_s"]))
        inc["materialise_rows"] = again.upserted + again.deleted
        inc["materialise_rows_per_s"] = round(inc["materialise_rows"] / inc["materialise_s"])
        r["incremental"] = inc
    finally:
        adapter.close()
        wal.close()
        shutil.rmtree(plain_out, ignore_errors=True)
        path.unlink(missing_ok=True)
    return r


def flush_state_round(spark: Any, meter: Meter, work: Path, n: int) -> dict[str, Any]:
    """Flush + state of ``n`` fresh WAL entries (a first load), nothing else."""
    gw = f"bench_{n}_{uuid.uuid4().hex[:6]}"
    path = work / f"wal_{gw}.db"
    r: dict[str, Any] = {"entries": n}
    url = fill_wal(path, gw, n, max(1000, n // 10))
    wal = WriteAheadLog.open(url)
    try:
        with meter.section(r, "flush"):
            flushed = flush_gateway(spark, session_catalog(spark), wal, jdbc_source(url), gw)
        with meter.section(r, "state"):
            update_state(spark, session_catalog(spark), gw, SCHEMA)
        assert flushed.entries == n, flushed
        r["flush_state_s"] = round(r["flush_s"] + r["state_s"], 3)
        r["flush_state_deltas_per_s"] = round(n / r["flush_state_s"])
    finally:
        wal.close()
        path.unlink(missing_ok=True)
    return r


_S3A_CATALOG_IO = {
    # The catalog's files through Hadoop's S3A instead of Iceberg's S3FileIO.
    "spark.sql.catalog.lakesync.io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
}


def object_store_run(io: str, sizes: list[int], repeat: int, warmup: int, out: Path) -> None:
    """The child process: flush + state rounds with the warehouse on a local S3 server."""
    work = Path(tempfile.mkdtemp(prefix="lakesync-bench-s3-"))
    try:
        with S3Server() as s3:
            s3.create_bucket("bench")
            store = ObjectStoreSettings.from_env(s3.env)
            settings = SparkSettings(
                data_dir=work / "lake",
                warehouse="s3://bench/warehouse",
                s3=S3Access(
                    store.endpoint, store.region, store.access_key_id, store.secret_access_key
                ),
                driver_memory="6g",
                shuffle_partitions=8,
                extra_conf=_S3A_CATALOG_IO if io == "s3a" else {},
            )
            spark = create_spark_session(settings, env=os.environ)
            meter = Meter(spark)
            report: dict[str, Any] = {
                "io": io,
                "cold_round": flush_state_round(spark, meter, work, warmup),
            }
            report["results"] = []
            for n in sizes:
                rounds = [flush_state_round(spark, meter, work, n) for _ in range(repeat)]
                report["results"].append(
                    {
                        "entries": n,
                        "flush_state_s": statistics.median(r["flush_state_s"] for r in rounds),
                        "all_rounds": rounds,
                    }
                )
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out.write_text(json.dumps(report))


def object_store_figures(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Run :func:`object_store_run` in a child process for each catalog I/O; their reports."""
    figures: dict[str, Any] = {}
    for io in ("s3fileio", "s3a"):
        out = work / f"object-store-{io}.json"
        command = [
            sys.executable,
            __file__,
            "--object-store-run",
            io,
            "--sizes",
            args.sizes,
            "--repeat",
            str(args.repeat),
            "--warmup",
            str(args.warmup),
            "--out",
            str(out),
        ]
        subprocess.run(command, check=True)
        figures[io] = json.loads(out.read_text())
    return figures


def plain_copy(spark: Any, gw: str, pg_url: str, meter: Meter, into: dict[str, Any]) -> int:
    """COPY the same live state rows (already in memory) into an empty Postgres table, timed
    into ``into['plain_copy_s']``; return the row count."""
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
        with meter.section(into, "plain_copy"), engine.begin() as conn:
            raw = conn.connection.driver_connection
            with (
                raw.cursor() as cur,
                cur.copy(  # type: ignore[union-attr]
                    f"COPY plain_copy ({', '.join(cols)}) FROM STDIN"
                ) as copy,
            ):
                for row in data:
                    copy.write_row(row)
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE plain_copy")
    finally:
        engine.dispose()
    return len(data)


def main() -> None:
    """Run the benchmark and write ``benchmarks/results/pipeline.json``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per size (median reported)")
    parser.add_argument("--warmup", type=int, default=100_000, help="entries of the warm-up round")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument(
        "--hadoop-local-fs",
        action="store_true",
        help="write the lake through Hadoop's default local filesystem (a chmod process per "
        "file) instead of the fork-free one, to measure what that one saves",
    )
    parser.add_argument(
        "--no-object-store", action="store_true", help="skip the flush + state rounds on S3"
    )
    parser.add_argument("--object-store-run", choices=["s3fileio", "s3a"], help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(RESULTS / "pipeline.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.object_store_run:
        object_store_run(args.object_store_run, sizes, args.repeat, args.warmup, Path(args.out))
        return
    postgres = PostgresBackend(args.pg_url)
    pg_url = postgres.fresh("pipeline")
    work = Path(tempfile.mkdtemp(prefix="lakesync-bench-"))
    report: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(),
        },
        "protocol": {"repeat": args.repeat, "warmup_entries": args.warmup},
        "results": [],
    }
    try:
        settings = SparkSettings(
            data_dir=work / "lake",
            driver_memory="6g",
            shuffle_partitions=8,
            fork_free_local_fs=not args.hadoop_local_fs,
        )
        spark = create_spark_session(settings, env=os.environ)
        report["lake_filesystem"] = spark.conf.get(
            "spark.sql.catalog.lakesync.hadoop.fs.file.impl", "Hadoop default"
        )
        # As the pipeline does: materialise reads the lake through pyiceberg where it can.
        catalog = local_pyiceberg_catalog(settings)
        meter = Meter(spark)
        cold = bench_round(spark, meter, work, args.warmup, pg_url, catalog)
        report["cold_round"] = cold
        print("cold (first round in a fresh JVM, not reported):", json.dumps(cold), flush=True)
        for n in sizes:
            rounds = []
            for _ in range(args.repeat):
                rounds.append(bench_round(spark, meter, work, n, pg_url, catalog))
                print(json.dumps(rounds[-1]), flush=True)
            # Each metric's median over the rounds, taken independently: the flush + state
            # figures come from the round with the median flush+state ratio, the materialise
            # figures from the round with the median materialise ratio.
            by_flush = median_item(rounds, key=lambda r: r["flush_state_ratio"])
            by_mat = median_item(rounds, key=lambda r: r["materialise_ratio"])
            median = dict(by_flush)
            for key in _MATERIALISE_KEYS:
                median[key] = by_mat[key]
            median["all_rounds"] = rounds
            median["local_flush_state_median_s"] = statistics.median(
                r["flush_state_s"] for r in rounds
            )
            report["results"].append(median)
        spark.stop()
        if not args.no_object_store:
            report["object_store"] = object_store_figures(args, work)
            for r, s3, s3a in zip(
                report["results"],
                report["object_store"]["s3fileio"]["results"],
                report["object_store"]["s3a"]["results"],
                strict=True,
            ):
                local = r["local_flush_state_median_s"]
                r["s3_flush_state_s"] = s3["flush_state_s"]
                r["s3_ratio"] = round(s3["flush_state_s"] / local, 2)
                r["s3a_flush_state_s"] = s3a["flush_state_s"]
                r["s3a_ratio"] = round(s3a["flush_state_s"] / local, 2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        postgres.drop(pg_url)
    write_json(args.out, report)
    print(
        f"{'entries':>9} {'flush+state s':>14} {'deltas/s':>9} {'plain s':>8} {'ratio':>6} "
        f"{'mat rows':>9} {'mat s':>6} {'rows/s':>8} {'COPY s':>7} {'ratio':>6} "
        f"{'incr deltas/s':>13} {'incr mat rows/s':>15}"
    )
    for r in report["results"]:
        inc = r["incremental"]
        print(
            f"{r['entries']:>9} {r['flush_state_s']:>14} {r['flush_state_deltas_per_s']:>9} "
            f"{r['plain_parquet_s']:>8} {r['flush_state_ratio']:>6} {r['materialise_rows']:>9} "
            f"{r['materialise_s']:>6} {r['materialise_rows_per_s']:>8} {r['plain_copy_s']:>7} "
            f"{r['materialise_ratio']:>6} {inc['flush_state_deltas_per_s']:>13} "
            f"{inc['materialise_rows_per_s']:>15}"
        )
    if "object_store" in report:
        print(
            f"{'entries':>9} {'local disk s':>12} {'S3 (S3FileIO) s':>15} {'ratio':>6} "
            f"{'S3 (S3A) s':>10} {'ratio':>6}   flush + state, medians"
        )
        for r in report["results"]:
            print(
                f"{r['entries']:>9} {r['local_flush_state_median_s']:>12} "
                f"{r['s3_flush_state_s']:>15} {r['s3_ratio']:>6} {r['s3a_flush_state_s']:>10} "
                f"{r['s3a_ratio']:>6}"
            )
    for r in report["results"]:
        for key in ("flush_state_ratio", "materialise_ratio"):
            values = [x[key] for x in r["all_rounds"]]
            print(f"{key} at {r['entries']}: median {r[key]} (rounds {min(values)}..{max(values)})")


if __name__ == "__main__":
    main()
