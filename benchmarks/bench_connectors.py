"""SQL connectors: the ``cursor`` and ``diff`` strategies at N source rows, 1% changed between
runs.

For each size N (default 100k and 1M) a PostgreSQL table of N rows is polled twice by each
strategy into a fresh SQLite WAL: the **initial** load (every row appended) and, after 1% of
the rows changed at the source (one column and the cursor column), the **incremental** poll
(only the changed column of the changed rows appended). Each poll runs in a fresh process
(``lakesync_platform.pipeline.connectors.run_connector``, as ``lakesync run connector``
does), so its figures are its own: wall time, records read, WAL entries appended, records/s,
and the peak RSS of the poll's Python process (``ru_maxrss``; the Spark JVM of the ``diff``
strategy is a separate process, its peak is reported beside it as ``jvm_peak_mb``). The
embedded SQLite WAL maps its file into memory (``mmap_size`` 1 GiB) and keeps a page cache per
connection, so ``ru_maxrss`` grows with the WAL's size; ``anon_peak_mb`` — the largest
anonymous (heap) RSS sampled every 20 ms — is what the poll itself holds.

Targets (2-core machine): a 1M-row ``diff`` with 1% changed in ≤ 60 s; the peak RSS of a poll
at 1M rows ≤ 1.5× that at 100k.

Usage: ``python benchmarks/bench_connectors.py [--sizes 100000,1000000] [--pg-url URL]``.
Prints a table and writes ``benchmarks/results/connectors.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.output import RESULTS, log, table, write_json

ROOT = Path(__file__).resolve().parents[1]
GW = "bench"


def _child(args: argparse.Namespace) -> None:
    """One poll, in this (fresh) process: prints its figures as JSON."""
    from lakesync_platform.pipeline.connectors import run_connector
    from lakesync_platform.pipeline.context import PipelineContext
    from lakesync_platform.settings import PipelineSettings
    from lakesync_platform.wal.store import WriteAheadLog

    settings = PipelineSettings.from_env(
        {**os.environ, "LAKESYNC_JAR_DIR": str(ROOT / "data" / "jars")},
        data_dir=args.data_dir,
        defs_dir=str(Path(args.data_dir) / "no-defs"),
    )
    wal = WriteAheadLog.open(args.wal_url)
    ctx = PipelineContext(settings, wal=wal)
    anon_peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    anon_peak[0] = max(anon_peak[0], int(line.split()[1]))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    report = run_connector(ctx, GW, args.child)
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    jvm_peak = None
    if ctx._spark is not None:  # the JVM of this run, if one started
        pid = ctx.spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                jvm_peak = int(line.split()[1]) / 1024
    wal.close()
    out = {
        "seconds": round(seconds, 2),
        "records": report.records,
        "deltas": report.deltas,
        "records_per_s": round(report.records / seconds) if seconds else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "anon_peak_mb": round(anon_peak[0] / 1024, 1),
        "jvm_peak_mb": None if jvm_peak is None else round(jvm_peak, 1),
    }
    print(json.dumps(out))


def _poll(data_dir: Path, wal_url: str, connector: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", connector, "--data-dir", str(data_dir)]
    done = subprocess.run(
        [*cmd, "--wal-url", wal_url],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SRC_PW": ""},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"poll {connector} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _source(pg_admin: str, rows: int) -> tuple[str, str]:
    """A fresh database holding ``items`` with ``rows`` rows; returns (url, name)."""
    name = "bench_conn_" + uuid.uuid4().hex[:8]
    admin = sqlalchemy.create_engine(pg_admin, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    url = pg_admin.rsplit("/", 1)[0] + "/" + name
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT, price NUMERIC(12,2), "
            "qty INT, updated_at TIMESTAMP NOT NULL)"
        )
        conn.exec_driver_sql(
            "INSERT INTO items SELECT i, 'item ' || i, i * 0.5, i %% 97, "
            "TIMESTAMP '2026-01-01' + i * INTERVAL '1 millisecond' "
            f"FROM generate_series(1, {rows}) i"
        )
        conn.exec_driver_sql("CREATE INDEX items_updated ON items (updated_at)")
    engine.dispose()
    return url, name


def _change_one_percent(url: str) -> int:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        changed = conn.exec_driver_sql(
            "UPDATE items SET price = price + 1, updated_at = TIMESTAMP '2027-01-01' "
            "+ id * INTERVAL '1 millisecond' WHERE id %% 100 = 0"
        ).rowcount
    engine.dispose()
    return int(changed)


def _register(wal_url: str, url: str) -> None:
    from lakesync_platform.core.connectors import parse_connector_config
    from lakesync_platform.wal.store import WriteAheadLog

    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    conn = f"{scheme}://{user.split(':')[0]}:${{SRC_PW}}@{host}"
    wal = WriteAheadLog.open(wal_url)
    for strategy in ("cursor", "diff"):
        spec: dict[str, Any] = {"type": "diff"}
        if strategy == "cursor":
            spec = {"type": "cursor", "cursorColumn": "updated_at", "lookbackMs": 0}
        body = {
            "name": strategy,
            "type": "postgres",
            "postgres": {"connectionString": conn},
            "ingest": {"tables": [{"table": f"items_{strategy}", "sourceTable": "items",
                                   "strategy": spec}]},
        }  # fmt: skip
        wal.save_connector(GW, parse_connector_config(body))
    wal.close()


def main() -> None:
    """Run every size and strategy; print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--child")
    parser.add_argument("--data-dir")
    parser.add_argument("--wal-url")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    results: list[dict[str, Any]] = []
    for size in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-conn-") as tmp:
            data_dir = Path(tmp)
            wal_url = f"sqlite:///{data_dir / 'wal.db'}"
            log(f"{size:,} rows: filling the source")
            url, db = _source(args.pg_url, size)
            try:
                _register(wal_url, url)
                first = {s: _poll(data_dir, wal_url, s) for s in ("cursor", "diff")}
                changed = _change_one_percent(url)
                for strategy in ("cursor", "diff"):
                    log(f"{size:,} rows: {strategy} incremental ({changed} changed)")
                    again = _poll(data_dir, wal_url, strategy)
                    results.append(
                        {"size": size, "strategy": strategy, "changed": changed,
                         "initial": first[strategy], "incremental": again}
                    )  # fmt: skip
            finally:
                admin = sqlalchemy.create_engine(args.pg_url, isolation_level="AUTOCOMMIT")
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
                admin.dispose()
    rows = [
        [r["size"], r["strategy"], phase, p["seconds"], p["records"], json.dumps(p["deltas"]),
         p["records_per_s"], p["peak_rss_mb"], p["anon_peak_mb"], p["jvm_peak_mb"] or "-"]
        for r in results
        for phase, p in (("initial", r["initial"]), ("1% changed", r["incremental"]))
    ]  # fmt: skip
    headers = ["rows", "strategy", "poll", "s", "records", "deltas", "rec/s", "rss MB", "anon MB",
               "jvm MB"]  # fmt: skip
    print(table(headers, rows))
    by = {(r["size"], r["strategy"]): r for r in results}
    summary: dict[str, Any] = {}
    sizes = sorted({r["size"] for r in results})
    if len(sizes) > 1:
        small, big = sizes[0], sizes[-1]
        for strategy in ("cursor", "diff"):
            for metric in ("peak_rss_mb", "anon_peak_mb"):
                peaks = [
                    max(by[(n, strategy)][p][metric] for p in ("initial", "incremental"))
                    for n in (small, big)
                ]
                ratio = round(peaks[1] / peaks[0], 2)
                summary[f"{strategy}_{metric.removesuffix('_mb')}_ratio_{big}_vs_{small}"] = ratio
        summary[f"diff_incremental_seconds_{big}"] = by[(big, "diff")]["incremental"]["seconds"]
    print(json.dumps(summary))
    out = write_json(
        RESULTS / "connectors.json",
        {"machine": platform.node(), "cpus": os.cpu_count(), "results": results,
         "summary": summary},
    )  # fmt: skip
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
