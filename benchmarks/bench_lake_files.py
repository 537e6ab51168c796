"""Files per lake table after many sync runs, with and without compaction in the sync job.

One gateway, one table of ``--rows`` row ids; ``--runs`` sync rounds, each pushing ``--batch``
updates (through the real SyncService) and running flush → state (→ compaction when due), side
by side in one process on one Spark session (a Spark Connect server the benchmark starts, as
``lakesync dev`` runs):

* ``compacting`` — the sync job as it is (``LAKESYNC_COMPACT_EVERY_FILES``, default 16);
* ``daily only`` — compaction left to the daily upkeep, as before
  (``LAKESYNC_COMPACT_EVERY_FILES=0``).

Every ``--every`` runs it records each table's data and delete files and the warm read time of
the state table (``count(*)`` and a sum over live rows, median of 3), and each run's seconds.

    python benchmarks/bench_lake_files.py [--runs 500] [--batch 20] [--rows 48] [--every 50]

Prints a table and writes ``benchmarks/results/lake_files.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.output import RESULTS, log, table, write_json
from benchmarks.harness.snapshot import ROOT, git_info

SCHEMA = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "completed", "type": "boolean"},
        {"name": "priority", "type": "number"},
    ],
}


def _read_seconds(spark: Any, name: str) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        spark.sql(f"SELECT count(*), sum(priority) FROM {name} WHERE `_ls$live`").collect()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run_variant(spark: Any, work: Path, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """``args.runs`` sync rounds on a fresh gateway; the samples."""
    from lakesync_platform.core.delta import ColumnDelta, RowDelta
    from lakesync_platform.core.hlc import encode
    from lakesync_platform.core.ids import delta_id
    from lakesync_platform.core.schema import parse_table_schema
    from lakesync_platform.pipeline.compaction import compact_due
    from lakesync_platform.pipeline.context import PipelineContext
    from lakesync_platform.pipeline.flush import run_flush
    from lakesync_platform.pipeline.state import run_state
    from lakesync_platform.settings import PipelineSettings
    from lakesync_platform.spark.layout import deltas_table, state_table
    from lakesync_platform.spark.upkeep import table_files
    from lakesync_platform.sync.service import SyncService
    from lakesync_platform.wal.store import WriteAheadLog

    gw = f"files_{variant.replace(' ', '_')}"
    wal_url = f"sqlite:///{work / (gw + '.db')}"
    env = {"LAKESYNC_COMPACT_EVERY_FILES": "16" if variant == "compacting" else "0"}
    settings = PipelineSettings.from_env(env, data_dir=work / "lake", wal_url=wal_url)
    wal = WriteAheadLog.open(wal_url)
    clock = [1_767_000_000_000]
    service = SyncService(wal, clock=lambda: clock[0])
    service.save_schema(gw, parse_table_schema(SCHEMA))
    ctx = PipelineContext(settings, spark=spark, wal=wal)
    samples: list[dict[str, Any]] = []
    run_seconds: list[float] = []
    tick = 0
    try:
        for n in range(1, args.runs + 1):
            deltas = []
            for i in range(args.batch):
                tick += 1
                clock[0] += 1
                hlc = encode(clock[0], 0)
                row = f"todo-{(n * args.batch + i) % args.rows}"
                cols = (ColumnDelta("title", f"run {n}"), ColumnDelta("completed", i % 2 == 0),
                        ColumnDelta("priority", i % 5))  # fmt: skip
                deltas.append(RowDelta("UPDATE", "todos", row, "bench", cols, hlc,
                                       delta_id("bench", hlc, "todos", row, cols)))  # fmt: skip
            service.push(gw, "bench", deltas)
            started = time.perf_counter()
            run_flush(ctx, gw)
            run_state(ctx, gw)
            compact_due(ctx, gw)
            run_seconds.append(time.perf_counter() - started)
            if n % args.every == 0 or n == args.runs:
                log_files = table_files(ctx.lake_catalog, deltas_table(gw))
                state_files = table_files(ctx.lake_catalog, state_table(gw, "todos"))
                samples.append({
                    "run": n,
                    "log_data_files": log_files.data_files,
                    "log_delete_files": log_files.delete_files,
                    "state_data_files": state_files.data_files,
                    "state_delete_files": state_files.delete_files,
                    "state_read_s": _read_seconds(spark, state_table(gw, "todos")),
                    "run_s_median_last": statistics.median(run_seconds[-args.every:]),
                })  # fmt: skip
                log(f"{variant} after {n} runs: {samples[-1]}")
    finally:
        ctx.close()
        wal.close()
    return {"variant": variant, "samples": samples, "run_seconds": run_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--every", type=int, default=50)
    args = parser.parse_args()

    from lakesync_platform.spark.server import start_server, wait_for_server
    from lakesync_platform.spark.session import SparkSettings, create_spark_session
    from lakesync_platform.testing import free_port

    work = Path(tempfile.mkdtemp(prefix="lakesync-files-"))
    settings = SparkSettings(data_dir=work / "lake", jar_dir=ROOT / "data" / "jars")
    port = free_port()
    server = start_server(settings, port, os.environ)
    try:
        url = f"sc://127.0.0.1:{port}"
        wait_for_server(url, server, timeout_s=180)
        from dataclasses import replace

        spark = create_spark_session(replace(settings, remote=url), env=os.environ)
        results = [run_variant(spark, work, v, args) for v in ("compacting", "daily only")]
    finally:
        server.terminate()
        server.wait(timeout=60)
    rows = []
    for result in results:
        last = result["samples"][-1]
        rows.append([result["variant"], last["run"],
                     f"{last['log_data_files']}+{last['log_delete_files']}",
                     f"{last['state_data_files']}+{last['state_delete_files']}",
                     last["state_read_s"], statistics.median(result["run_seconds"])])  # fmt: skip
    print(table(["variant", "runs", "log files (data+delete)", "state files (data+delete)",
                 "warm state read s", "run s (median)"], rows))  # fmt: skip
    path = write_json(RESULTS / "lake_files.json", {
        "bench": "lake_files", "git": git_info(), "args": vars(args), "results": results,
        "load_average": os.getloadavg(),
    })  # fmt: skip
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
