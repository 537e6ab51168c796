"""Peak memory of materialise: a first load of a large state table, streamed vs collected.

Builds one state table per size (``--sizes``, default 100k and 1M rows; four value columns —
string, number, boolean, json — in the lake's layout, written by Spark), then materialises it
into a fresh SQLite destination in a child process per round and variant, and reads the
child's peak resident memory (``ru_maxrss``):

* ``streamed`` — the pipeline's materialise (:func:`materialise_table`): pyiceberg reads the
  changed rows file by file as Arrow batches of at most 50 000 rows, each applied before the
  next is read;
* ``collected`` — what materialise did before: the changed rows read whole into one Arrow
  table (``scan.to_arrow()``), then applied in the same 50 000-row batches.

    python benchmarks/bench_materialise_memory.py [--sizes 100000,1000000] [--rounds 3]

Prints peak RSS and seconds per size and variant (medians); writes
``benchmarks/results/materialise_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.output import RESULTS, log, table, write_json
from benchmarks.harness.snapshot import ROOT, git_info

GW = "bench_mem"
SCHEMA_JSON = {
    "table": "items",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "price", "type": "number"},
        {"name": "done", "type": "boolean"},
        {"name": "meta", "type": "json"},
    ],
}


def _schema() -> Any:
    from lakesync_platform.core.schema import parse_table_schema

    return parse_table_schema(SCHEMA_JSON)


def build(data_dir: Path, rows: int) -> None:
    """The state table of ``rows`` live rows, written by Spark in the lake's layout."""
    from lakesync_platform.spark.layout import ensure_state_table
    from lakesync_platform.spark.session import SparkSettings, create_spark_session

    settings = SparkSettings(data_dir=data_dir, jar_dir=ROOT / "data" / "jars")
    spark = create_spark_session(settings, env=os.environ)
    name = ensure_state_table(spark, GW, _schema())
    stamp = "1767000000000"
    spark.sql(
        f"""INSERT INTO {name} SELECT
          concat('row-', lpad(CAST(id AS string), 8, '0')) AS row_id,
          concat('a title of some length for row ', CAST(id AS string)),
          CAST(id % 1000 AS double) * 1.5,
          id % 2 = 0,
          concat('{{"tags":["x","y"],"n":', CAST(id AS string), '}}'),
          true, CAST(NULL AS bigint), CAST(NULL AS string), id + 1,
          {stamp}, 'client-a', {stamp}, 'client-a', {stamp}, 'client-a', {stamp}, 'client-a'
        FROM range({rows})"""
    )
    spark.stop()


def child(data_dir: Path, variant: str) -> None:
    """One materialise of the whole state into a fresh SQLite file; prints a JSON line."""
    import pyarrow as pa

    from lakesync_platform.adapters.sql import SqlAdapter
    from lakesync_platform.spark import materialise as m
    from lakesync_platform.spark.session import SparkSettings, pyiceberg_catalog

    catalog = pyiceberg_catalog(SparkSettings(data_dir=data_dir))
    if variant == "collected":  # before: the changed rows whole in one Arrow table
        original = m._read_batches

        def collected(*args: Any, **kwargs: Any) -> Any:
            reader, snapshot = original(*args, **kwargs)
            whole = reader.read_all()
            return pa.RecordBatchReader.from_batches(whole.schema, whole.to_batches()), snapshot

        m._read_batches = collected  # type: ignore[assignment]
    out = Path(tempfile.mkdtemp(prefix="mem-dest-")) / "dest.db"
    adapter = SqlAdapter.connect(f"sqlite:///{out}")
    started = time.perf_counter()
    result = m.materialise_table(None, catalog, GW, _schema(), adapter)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    adapter.close()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps({"upserted": result.upserted, "seconds": seconds, "peak_rss_mb": peak_kb / 1024})
    )
    out.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("DATA_DIR", "VARIANT"))
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1])
        return
    work = Path(tempfile.mkdtemp(prefix="lakesync-mem-"))
    results: list[dict[str, Any]] = []
    rows_out = []
    for size in (int(s) for s in args.sizes.split(",")):
        lake = work / f"lake-{size}"
        log(f"building a state table of {size:,} rows")
        build(lake, size)
        for variant in ("streamed", "collected"):
            figures = []
            for _ in range(args.rounds):
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.bench_materialise_memory", "--child",
                     str(lake), variant],
                    cwd=ROOT, capture_output=True, text=True, check=True,
                )  # fmt: skip
                figures.append(json.loads(done.stdout.strip().splitlines()[-1]))
                log(f"{size:,} {variant}: {figures[-1]}")
            assert all(f["upserted"] == size for f in figures), figures
            peak = statistics.median(f["peak_rss_mb"] for f in figures)
            secs = statistics.median(f["seconds"] for f in figures)
            results.append({"rows": size, "variant": variant, "peak_rss_mb": peak,
                            "seconds": secs, "rounds": figures})  # fmt: skip
            rows_out.append([size, variant, peak, secs])
    print(table(["state rows", "variant", "peak RSS MB", "seconds"], rows_out))
    path = write_json(RESULTS / "materialise_memory.json",
                      {"bench": "materialise_memory", "git": git_info(), "results": results,
                       "load_average": os.getloadavg()})  # fmt: skip
    log(f"wrote {path}")
    import shutil

    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
