"""Lake upkeep: compaction of a lake built by many small flushes, and the reads time travel uses.

One gateway's lake is built the way a busy gateway builds it: ``--flushes`` rounds, each
appending ``--batch`` WAL entries over ``--rows`` row ids (10% deletes) and running flush then
state (so the change log gets a small file per flush, and the state table a data file and a
position-delete file per ``MERGE``). Then:

* **before** — files and bytes of the change log and the state table, and the time of two reads
  of the state (``--reads`` rounds each, median): a full scan (``count`` and ``sum`` over live
  rows: every data file opened, every delete applied) and a point lookup by ``row_id``;
* **compaction** (:func:`~lakesync_platform.pipeline.upkeep.run_compaction`) and **expiry**
  (:func:`~lakesync_platform.pipeline.upkeep.run_expiry`, retention 0: every snapshot but the
  current ones goes, then orphan removal) — wall time, CPU of this process and its JVM, files
  and bytes after;
* **after** — the same reads; speed-up = before / after (median rounds, measured side by side
  in one run, so a machine's load shifts both).

Before compaction, the reads of ``lakesync history`` and ``lakesync query`` (``--reads`` rounds,
medians): the state table's history (``--flushes`` snapshots) through pyiceberg (no JVM) against
the same through the Spark session (one ``TableMetadataParser.toJson`` call) and through Spark
SQL's ``snapshots`` metadata table; and a small read (the state table into Arrow) through
pyiceberg against Spark. At the end, ``lakesync history`` and ``lakesync query`` as an operator
runs them, each in a fresh process (``--reads`` runs, medians): the first reads with pyiceberg
only, the second starts Spark.

Each section records wall seconds, the CPU seconds this process and its JVM used (``own_cpu_s``)
and those the rest of the machine used meanwhile (``other_cpu_s``, /proc/stat; 2 cores).

Usage: ``python benchmarks/bench_upkeep.py [--flushes 100] [--batch 500] [--rows 5000]
[--reads 5]``. Prints tables and writes ``benchmarks/results/upkeep.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_pipeline import fill_wal
from benchmarks.harness.cpu import host_cpu, process_cpu, spark_jvm_pid
from benchmarks.harness.output import RESULTS, log, table, write_json
from lakesync_platform.pipeline.context import PipelineContext, spark_settings
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.report import describe
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.pipeline.upkeep import run_compaction, run_expiry
from lakesync_platform.settings import PipelineSettings, UpkeepSettings
from lakesync_platform.spark.arrow import collect_arrow
from lakesync_platform.spark.history import history_from_pyiceberg, history_from_spark
from lakesync_platform.spark.layout import deltas_table, state_table
from lakesync_platform.spark.session import pyiceberg_catalog
from lakesync_platform.spark.session_catalog import session_catalog
from lakesync_platform.spark.upkeep import table_files
from lakesync_platform.testing import demo_todos_schema

SCHEMA = demo_todos_schema()


class Meter:
    """Wall time, own CPU (this process and its JVM) and the rest of the machine's CPU."""

    def __init__(self, spark: Any) -> None:
        self.jvm_pid = spark_jvm_pid(spark)

    def _own(self) -> float:
        me = os.times()
        jvm = process_cpu(self.jvm_pid) if self.jvm_pid is not None else 0.0
        return jvm + me.user + me.system

    @contextmanager
    def section(self, into: dict[str, Any]) -> Iterator[None]:
        """Time the block into ``into``: ``s``, ``own_cpu_s``, ``other_cpu_s``."""
        busy, steal = host_cpu()
        own, t = self._own(), time.perf_counter()
        yield
        into["s"] = round(time.perf_counter() - t, 4)
        used = self._own() - own
        after_busy, after_steal = host_cpu()
        into["own_cpu_s"] = round(used, 3)
        into["other_cpu_s"] = round(max((after_busy + after_steal) - (busy + steal) - used, 0), 2)


def rounds(meter: Meter, n: int, work: Callable[[], object]) -> dict[str, Any]:
    """``n`` timed runs of ``work``: all of them, and the median of each figure."""
    runs = []
    for _ in range(n):
        one: dict[str, Any] = {}
        with meter.section(one):
            work()
        runs.append(one)
    return {
        "median_s": round(statistics.median(r["s"] for r in runs), 4),
        "median_own_cpu_s": round(statistics.median(r["own_cpu_s"] for r in runs), 3),
        "runs": runs,
    }


def lake_files(spark: Any, gw: str) -> dict[str, Any]:
    """Files and bytes of the change log and the state table."""
    out = {}
    for name, qualified in (("log", deltas_table(gw)), ("state", state_table(gw, "todos"))):
        f = table_files(session_catalog(spark), qualified)
        out[name] = {
            "data_files": f.data_files,
            "delete_files": f.delete_files,
            "bytes": f.bytes,
            "snapshots": f.snapshots,
        }
    return out


def state_reads(spark: Any, meter: Meter, gw: str, n: int) -> dict[str, Any]:
    """A full scan and a point lookup of the state table, ``n`` rounds each."""
    name = state_table(gw, "todos")
    scan = f"SELECT count(*), sum(priority) FROM {name} WHERE `_ls$live`"
    point = f"SELECT title FROM {name} WHERE row_id = 'row-42'"
    return {
        "scan": rounds(meter, n, lambda: spark.sql(scan).collect()),
        "point": rounds(meter, n, lambda: spark.sql(point).collect()),
    }


def build_lake(
    ctx: PipelineContext, path: Path, gw: str, flushes: int, batch: int, rows: int
) -> float:
    """The lake of ``flushes`` small flush + state rounds (the WAL at ``path`` holds the first
    batch already); returns the seconds it took."""
    started = time.perf_counter()
    ctx.wal.save_schema(gw, SCHEMA)
    for i in range(flushes):
        if i:
            fill_wal(path, gw, batch, rows, start=i * batch)
        run_flush(ctx, gw)
        run_state(ctx, gw)
        if (i + 1) % 10 == 0:
            log(f"  {i + 1} / {flushes} flushes")
    return time.perf_counter() - started


def cli_timings(work: Path, gw: str, n: int, wal_path: Path) -> dict[str, Any]:
    """Wall seconds of ``lakesync history`` and ``lakesync query`` in fresh processes (what an
    operator waits for), ``n`` runs each, medians."""
    exe = Path(sys.executable).with_name("lakesync")
    data = ["--gw", gw, "--data-dir", str(work / "lake")]
    env = {
        **os.environ,
        "LAKESYNC_JAR_DIR": str(Path(__file__).resolve().parents[1] / "data" / "jars"),
    }
    commands = {
        "history": [str(exe), "history", "todos", *data],
        "query": [str(exe), "query", "SELECT count(*) FROM todos WHERE `_ls$live`", *data],
    }
    out: dict[str, Any] = {}
    for name, command in commands.items():
        runs = []
        for _ in range(n):
            started = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            runs.append(round(time.perf_counter() - started, 3))
        out[name] = {"median_s": statistics.median(runs), "runs": runs}
    return out


def main() -> None:
    """Run the benchmark and write ``benchmarks/results/upkeep.json``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--flushes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=500, help="WAL entries per flush")
    parser.add_argument("--rows", type=int, default=5000, help="row ids the entries touch")
    parser.add_argument("--reads", type=int, default=5, help="rounds of each read (median)")
    parser.add_argument("--out", default=str(RESULTS / "upkeep.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lakesync-bench-upkeep-"))
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "protocol": vars(args),
    }
    try:
        gw = f"bench_{uuid.uuid4().hex[:6]}"
        wal_path = work / "wal.db"
        fill_wal(wal_path, gw, args.batch, args.rows)
        settings = PipelineSettings(
            data_dir=work / "lake",
            wal_url="sqlite:///" + str(wal_path),
            jar_dir=Path(__file__).resolve().parents[1] / "data" / "jars",
            upkeep=UpkeepSettings.from_env({"LAKESYNC_SNAPSHOT_RETENTION_SECONDS": "0"}),
        )
        ctx = PipelineContext(settings)
        started = time.perf_counter()
        spark = ctx.spark
        report["spark_start_s"] = round(time.perf_counter() - started, 2)
        meter = Meter(spark)
        log(f"building a lake of {args.flushes} flushes of {args.batch} entries …")
        report["build_s"] = round(
            build_lake(ctx, wal_path, gw, args.flushes, args.batch, args.rows), 1
        )
        report["before"] = {"files": lake_files(spark, gw)}
        log("reads before compaction …")
        report["before"]["reads"] = state_reads(spark, meter, gw, args.reads)
        log("history and small reads before compaction: pyiceberg against Spark …")
        catalog = pyiceberg_catalog(spark_settings(ctx.settings))
        state = state_table(gw, "todos")
        report["metadata_reads"] = {
            "history_pyiceberg": rounds(
                meter, args.reads, lambda: history_from_pyiceberg(catalog.load_table((gw, "todos")))
            ),
            "history_spark_api": rounds(
                meter, args.reads, lambda: history_from_spark(spark, state)
            ),
            "history_spark_sql": rounds(
                meter, args.reads, lambda: spark.sql(f"SELECT * FROM {state}.snapshots").collect()
            ),
            "small_read_pyiceberg": rounds(
                meter, args.reads, lambda: catalog.load_table((gw, "todos")).scan().to_arrow()
            ),
            "small_read_spark": rounds(
                meter, args.reads, lambda: collect_arrow(spark.table(state))
            ),
        }
        log("compaction …")
        compaction: dict[str, Any] = {}
        with meter.section(compaction):
            compacted = run_compaction(ctx, gw)
        compaction["tables"] = {
            r.table: {"rewritten": r.rewritten_data_files, "added": r.added_data_files}
            for r in compacted
        }
        log("expiry …")
        expiry: dict[str, Any] = {}
        with meter.section(expiry):
            expired = run_expiry(ctx, gw)
        expiry["tables"] = {
            r.table: {"expired": r.snapshots_expired, "files_deleted": r.files_deleted}
            for r in expired
        }
        report["compaction"], report["expiry"] = compaction, expiry
        report["lines"] = [describe(r) for r in [*compacted, *expired]]
        report["after"] = {"files": lake_files(spark, gw)}
        log("reads after compaction …")
        report["after"]["reads"] = state_reads(spark, meter, gw, args.reads)
        report["speedup"] = {
            read: round(
                report["before"]["reads"][read]["median_s"]
                / report["after"]["reads"][read]["median_s"],
                2,
            )
            for read in ("scan", "point")
        }
        log("the CLI in fresh processes: history (pyiceberg) and query (Spark) …")
        report["cli"] = cli_timings(work, gw, args.reads, wal_path)
        report["machine"]["loadavg_at_end"] = os.getloadavg()
        print_report(report)
        out = write_json(args.out, report)
        log(f"wrote {out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def print_report(report: dict[str, Any]) -> None:
    """The figures as tables on stdout."""
    b, a = report["before"], report["after"]
    rows = []
    for name in ("log", "state"):
        rows.append(
            [
                name,
                b["files"][name]["data_files"],
                a["files"][name]["data_files"],
                b["files"][name]["delete_files"],
                a["files"][name]["delete_files"],
                b["files"][name]["bytes"],
                a["files"][name]["bytes"],
                b["files"][name]["snapshots"],
                a["files"][name]["snapshots"],
            ]
        )
    print(
        table(
            [
                "table",
                "files before",
                "after",
                "deletes before",
                "after",
                "bytes before",
                "after",
                "snapshots before",
                "after",
            ],
            rows,
        )
    )
    print()
    c, e = report["compaction"], report["expiry"]
    print(
        f"compaction {c['s']:.2f} s (own CPU {c['own_cpu_s']:.2f} s), expiry + orphans "
        f"{e['s']:.2f} s (own CPU {e['own_cpu_s']:.2f} s); lake built in {report['build_s']} s"
    )
    print()
    reads = [
        [
            read,
            b["reads"][read]["median_s"],
            a["reads"][read]["median_s"],
            report["speedup"][read],
        ]
        for read in ("scan", "point")
    ]
    print(table(["state read", "before s", "after s", "speed-up"], reads))
    print()
    meta = report["metadata_reads"]
    print(
        table(
            ["read", "median s", "own CPU s"],
            [[k, v["median_s"], v["median_own_cpu_s"]] for k, v in meta.items()],
        )
    )
    print()
    print("\n".join(report["lines"]))
    cli = report["cli"]
    print(
        f"\nlakesync history (fresh process): {cli['history']['median_s']} s; "
        f"lakesync query (fresh process, Spark starts): {cli['query']['median_s']} s"
    )
    print(f"Spark session start: {report['spark_start_s']} s")
    print(
        f"load average: start {report['machine']['loadavg_at_start']}, end "
        f"{report['machine']['loadavg_at_end']}"
    )


if __name__ == "__main__":
    main()
