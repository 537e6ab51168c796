"""Materialise into BigQuery (the emulator) beside a plain load of the same rows (rows/s).

For each size (state rows; the WAL holds twice as many entries over them, 10% deletes) the lake
is filled once (flush + state, not timed), then each round, in a fresh dataset:

* **materialise, first load** — ``materialise_table`` as the pipeline runs it: the changed state
  rows read by pyiceberg into Arrow, written as Parquet, one load job into a stage table, one
  ``INSERT … SELECT`` and the watermark, in one BigQuery transaction (a session);
* **materialise, upsert** — the same rows again over the full table (the watermark dropped, so
  every row is changed): load job into a stage, ``MERGE`` keyed by ``row_id``, soft deletes;
* **plain load** — the same live rows, already in memory as Arrow, written as Parquet and loaded
  by one load job into an equivalent empty table: what moving the rows costs with nothing else.

Ratio = materialise / plain. Each size runs ``--repeat`` rounds (default 5); the reported round
is the one with the median first-load ratio; all rounds are in the JSON. The emulator
(``bqemulator``, DuckDB underneath) runs on this machine, so the figures measure our path's
overheads (stage, sessions, statements), not BigQuery's service times.

Usage: ``python benchmarks/bench_bigquery.py [--sizes 10000,100000] [--repeat 5]``.
Prints a table and writes ``benchmarks/results/bigquery.json``.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_pipeline import fill_wal
from benchmarks.harness.output import RESULTS, log, table, write_json
from benchmarks.harness.stats import median_item
from lakesync_platform.adapters.bigquery import WATERMARKS, BigQueryAdapter
from lakesync_platform.spark.flush import flush_gateway
from lakesync_platform.spark.layout import LIVE_COL, log_table
from lakesync_platform.spark.materialise import materialise_table
from lakesync_platform.spark.session import (
    SparkSettings,
    create_spark_session,
    local_pyiceberg_catalog,
)
from lakesync_platform.spark.state import update_state
from lakesync_platform.spark.wal_source import jdbc_source
from lakesync_platform.testing import BigQueryEmulator, demo_todos_schema
from lakesync_platform.wal.store import WriteAheadLog

SCHEMA = demo_todos_schema()


def plain_load(adapter: BigQueryAdapter, rows: Any) -> float:
    """Seconds to write ``rows`` (Arrow) as Parquet and load them into a new empty table."""
    import pyarrow.parquet as pq
    from google.cloud import bigquery

    start = time.perf_counter()
    types = {"string": "STRING", "number": "FLOAT64", "boolean": "BOOL", "json": "STRING"}
    fields = [bigquery.SchemaField("row_id", "STRING")]
    fields += [bigquery.SchemaField(c.name, types[c.type]) for c in SCHEMA.columns]
    target = bigquery.Table(f"{adapter.project}.{adapter.dataset}.plain", schema=fields)
    adapter.client.create_table(target)
    buffer = io.BytesIO()
    pq.write_table(rows, buffer)
    buffer.seek(0)
    config = bigquery.LoadJobConfig(source_format="PARQUET", write_disposition="WRITE_APPEND")
    adapter.client.load_table_from_file(buffer, target.reference, job_config=config).result()
    return time.perf_counter() - start


def bench_round(spark: Any, catalog: Any, emulator: BigQueryEmulator, gw: str) -> dict[str, Any]:
    """One round in a fresh dataset: first load, upsert over it, plain load of the same rows."""
    dataset = "bench_" + uuid.uuid4().hex[:8]
    adapter = BigQueryAdapter.connect(emulator.project, dataset, endpoint=emulator.endpoint)
    try:
        r: dict[str, Any] = {}
        first = materialise_table(spark, catalog, gw, SCHEMA, adapter, rows_catalog=catalog)
        r["first_load_rows"] = first.upserted
        r["first_load_s"] = round(first.seconds, 3)
        r["first_load_rows_per_s"] = round(first.upserted / first.seconds)
        adapter.drop_table(WATERMARKS)
        again = materialise_table(spark, catalog, gw, SCHEMA, adapter, rows_catalog=catalog)
        r["upsert_rows"] = again.upserted + again.deleted
        r["upsert_s"] = round(again.seconds, 3)
        r["upsert_rows_per_s"] = round(r["upsert_rows"] / again.seconds)
        names = ["row_id", *[c.name for c in SCHEMA.columns]]
        state = catalog.load_table((gw, log_table(SCHEMA))).scan().to_arrow()
        live = state.filter(state.column(LIVE_COL)).select(names)
        plain = plain_load(adapter, live)
        r["plain_load_rows"] = live.num_rows
        r["plain_load_s"] = round(plain, 3)
        r["plain_load_rows_per_s"] = round(live.num_rows / plain)
        r["first_load_ratio"] = round(first.seconds / plain, 2)
        r["upsert_ratio"] = round(again.seconds / plain, 2)
        return r
    finally:
        adapter.close()


def main() -> None:
    """Run the benchmark and write ``benchmarks/results/bigquery.json``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000", help="state rows per size")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per size (median reported)")
    parser.add_argument("--out", default=str(RESULTS / "bigquery.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="lakesync-bench-bq-"))
    report: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(),
        },
        "protocol": {"repeat": args.repeat, "destination": "bqemulator 1.4.0 on loopback"},
        "results": [],
    }
    try:
        settings = SparkSettings(data_dir=work / "lake", shuffle_partitions=4)
        spark = create_spark_session(settings, env=os.environ)
        catalog = local_pyiceberg_catalog(settings)
        with BigQueryEmulator(work / "bqemulator.log") as emulator:
            for size in sizes:
                gw = f"bench_bq_{size}"
                log(f"filling the lake: {size:,} rows")
                wal_path = work / f"wal-{size}.db"
                wal_url = fill_wal(wal_path, gw, 2 * size, size)
                wal = WriteAheadLog.open(wal_url)
                try:
                    wal.save_schema(gw, SCHEMA)
                    flush_gateway(spark, catalog, wal, jdbc_source(wal_url), gw)
                    update_state(spark, catalog, gw, SCHEMA)
                finally:
                    wal.close()
                rounds = []
                for i in range(args.repeat):
                    rounds.append(bench_round(spark, catalog, emulator, gw))
                    log(f"{size:,} rows, round {i + 1}: {rounds[-1]}")
                best = median_item(rounds, key=lambda r: r["first_load_ratio"])
                report["results"].append({"rows": size, **best, "rounds": rounds})
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = write_json(args.out, report)
    headers = ["rows", "first load s", "rows/s", "upsert s", "rows/s", "plain s", "rows/s"]
    headers += ["ratio first", "ratio upsert"]
    print(
        table(
            headers,
            [
                [
                    r["rows"],
                    r["first_load_s"],
                    r["first_load_rows_per_s"],
                    r["upsert_s"],
                    r["upsert_rows_per_s"],
                    r["plain_load_s"],
                    r["plain_load_rows_per_s"],
                    r["first_load_ratio"],
                    r["upsert_ratio"],
                ]
                for r in report["results"]
            ],
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
