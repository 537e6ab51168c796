"""Connectors: the SQL ``cursor`` and ``diff`` strategies at N source rows, 1% changed between
runs; and Jira and Salesforce from their fake servers.

For each size N (default 100k and 1M) a PostgreSQL table of N rows is polled twice by each
strategy into a fresh SQLite WAL: the **initial** load (every row appended) and, after 1% of
the rows changed at the source (one column and the cursor column), the **incremental** poll
(only the changed column of the changed rows appended). Each poll runs in a fresh process
(``lakesync_platform.pipeline.connectors.run_connector``, as ``lakesync run connector``
does), so its figures are its own: wall time, records read, WAL entries appended, records/s,
and the peak RSS of the poll's Python process (``ru_maxrss``; the Spark JVM of the ``diff``
strategy is a separate process, its peak and CPU seconds are reported beside it as
``jvm_peak_mb`` and ``jvm_cpu_s``; its steps' seconds — recover, stage, compare, promote — as
``steps``). The
embedded SQLite WAL maps its file into memory (``mmap_size`` 1 GiB) and keeps a page cache per
connection, so ``ru_maxrss`` grows with the WAL's size; ``anon_peak_mb`` — the largest
anonymous (heap) RSS sampled every 20 ms — is what the poll itself holds.

Every poll opens the WAL as a pipeline run does (``BATCH_MEMORY``: a bounded SQLite page cache
and no memory map).

**Jira and Salesforce** (``--http-records``, default 50 000 records each): the fake server
(``python -m lakesync_platform.fakes``) runs in a process of its own with generated records
(Jira: issues with one comment each, so half as many issues; Salesforce: accounts, contacts,
opportunities and leads through ``queryAll``); a first poll reads every record into a fresh
SQLite WAL, a second poll of the same connector takes the delete census (a Spark job over the
id sweep). Reported: wall seconds and records/s, the poll process's CPU seconds and records
per CPU second (the figure that survives a loaded machine), the fake server's CPU seconds, the
peak RSS; the census's seconds.

Targets (2-core machine): a 1M-row ``diff`` with 1% changed in ≤ 60 s; the peak RSS of a poll
at 1M rows ≤ 1.5× that at 100k; ≥ 5 000 records/s from each fake.

Usage: ``python benchmarks/bench_connectors.py [--sources sql,jira,salesforce]
[--sizes 100000,1000000] [--http-records 50000] [--pg-url URL]``. Prints tables and writes
``benchmarks/results/connectors.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
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
from benchmarks.harness.cpu import spark_jvm_pid
from benchmarks.harness.output import RESULTS, log, table, write_json

ROOT = Path(__file__).resolve().parents[1]
GW = "bench"


def _child(args: argparse.Namespace) -> None:
    """One poll, in this (fresh) process: prints its figures as JSON."""
    from lakesync_platform.pipeline.connectors import run_connector
    from lakesync_platform.pipeline.context import PipelineContext
    from lakesync_platform.settings import PipelineSettings
    from lakesync_platform.wal.sqlite import BATCH_MEMORY, SERVER_MEMORY
    from lakesync_platform.wal.store import WriteAheadLog

    settings = PipelineSettings.from_env(
        {**os.environ, "LAKESYNC_JAR_DIR": str(ROOT / "data" / "jars")},
        data_dir=args.data_dir,
        defs_dir=str(Path(args.data_dir) / "no-defs"),
    )
    memory = SERVER_MEMORY if args.wal_memory == "server" else BATCH_MEMORY
    wal = WriteAheadLog.open(args.wal_url, memory=memory)  # batch: as a pipeline run opens it
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
    steps: dict[str, float] = {}

    class _Steps(logging.Handler):  # the diff's per-step timings (its log records)
        def emit(self, record: logging.LogRecord) -> None:
            step = getattr(record, "diff_step", None)
            if step is not None:
                steps[step] = round(steps.get(step, 0.0) + float(getattr(record, "seconds", 0)), 2)

    diff_log = logging.getLogger("lakesync_platform.spark.connector_diff")
    diff_log.setLevel(logging.INFO)
    diff_log.addHandler(_Steps())
    started = time.perf_counter()
    report = run_connector(ctx, GW, args.child)
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    jvm_peak = jvm_cpu = None
    if ctx._spark is not None:  # the JVM of this run, if one started
        pid = spark_jvm_pid(ctx.spark)  # None on a Spark Connect client: the server's JVM
        if pid is not None:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    jvm_peak = int(line.split()[1]) / 1024
            jvm_cpu = _cpu_seconds(pid)  # start-up included: survives the machine's load
    wal.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    out = {
        "seconds": round(seconds, 2),
        "records": report.records,
        "deltas": report.deltas,
        "records_per_s": round(report.records / seconds) if seconds else None,
        "cpu_s": round(cpu, 2),
        "records_per_cpu_s": round(report.records / cpu) if cpu else None,
        "census": report.census,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "anon_peak_mb": round(anon_peak[0] / 1024, 1),
        "jvm_peak_mb": None if jvm_peak is None else round(jvm_peak, 1),
        "jvm_cpu_s": None if jvm_cpu is None else round(jvm_cpu, 2),
        "steps": steps,
    }
    print(json.dumps(out))


def _poll(
    data_dir: Path,
    wal_url: str,
    connector: str,
    env: dict[str, str] | None = None,
    wal_memory: str = "batch",
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", connector, "--data-dir", str(data_dir)]
    cmd += ["--wal-memory", wal_memory]
    done = subprocess.run(
        [*cmd, "--wal-url", wal_url],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SRC_PW": "", **(env or {})},
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


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _http_connector(api: str, info: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The connector body polling the fake at ``info`` and the environment of its secrets."""
    if api == "jira":
        opts = {"domain": "bench", "email": info["email"], "apiToken": "${BENCH_TOKEN}",
                "baseUrl": info["url"], "censusEvery": 2}  # fmt: skip
        return {"name": api, "type": "jira", "jira": opts}, {"BENCH_TOKEN": info["token"]}
    opts = {"instanceUrl": info["url"], "loginUrl": info["url"], "clientId": info["client_id"],
            "clientSecret": "${BENCH_SECRET}", "username": info["username"],
            "password": "${BENCH_PASSWORD}", "censusEvery": 2, "bulkThreshold": 0}  # fmt: skip
    secrets = {"BENCH_SECRET": info["client_secret"], "BENCH_PASSWORD": info["password"]}
    return {"name": api, "type": "salesforce", "salesforce": opts}, secrets


def _http(api: str, records: int) -> dict[str, Any]:
    """A first poll of ``records`` records from the fake, then a poll that takes the census."""
    from lakesync_platform.core.connectors import parse_connector_config
    from lakesync_platform.wal.store import WriteAheadLog

    generated = records // 2 if api == "jira" else records  # a Jira issue has one comment
    fake = subprocess.Popen(
        [sys.executable, "-m", "lakesync_platform.fakes", api, "--records", str(generated)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert fake.stdout is not None
        info = json.loads(fake.stdout.readline())
        before = _cpu_seconds(fake.pid)
        with tempfile.TemporaryDirectory(prefix="bench-conn-") as tmp:
            wal_url = f"sqlite:///{Path(tmp) / 'wal.db'}"
            body, env = _http_connector(api, info)
            wal = WriteAheadLog.open(wal_url)
            wal.save_connector(GW, parse_connector_config(body))
            wal.close()
            log(f"{api}: first poll of {records:,} records")
            first = _poll(Path(tmp), wal_url, api, env)
            first["fake_cpu_s"] = round(_cpu_seconds(fake.pid) - before, 2)
            log(f"{api}: second poll (the census)")
            census = _poll(Path(tmp), wal_url, api, env)
        return {"api": api, "records": records, "first": first, "census": census}
    finally:
        fake.terminate()
        fake.wait()


def _http_report(results: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [
        [r["api"], r["first"]["records"], r["first"]["seconds"], r["first"]["records_per_s"],
         r["first"]["cpu_s"], r["first"]["records_per_cpu_s"], r["first"]["fake_cpu_s"],
         r["first"]["peak_rss_mb"], r["census"]["seconds"],
         (r["census"]["census"] or {}).get("last", {}).get("sourceIds", "-"),
         r["census"]["jvm_peak_mb"] or "-"]
        for r in results
    ]  # fmt: skip
    headers = ["api", "records", "s", "rec/s", "cpu s", "rec/cpu s", "fake cpu s", "rss MB",
               "census s", "ids", "jvm MB"]  # fmt: skip
    print(table(headers, rows))
    return {f"{r['api']}_records_per_s": r["first"]["records_per_s"] for r in results} | {
        f"{r['api']}_records_per_cpu_s": r["first"]["records_per_cpu_s"] for r in results
    }


def main() -> None:
    """Run every size and strategy; print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", default="sql,jira,salesforce")
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--http-records", type=int, default=50_000)
    parser.add_argument("--strategies", default="cursor,diff")
    parser.add_argument(
        "--wal-memory",
        choices=["batch", "server"],
        default="batch",
        help="SQLite memory of the polls' WAL: batch (what pipeline runs use) or server (the"
        " gateway's: 128 MiB cache, 1 GiB map; the figures before BATCH_MEMORY)",
    )
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--child")
    parser.add_argument("--data-dir")
    parser.add_argument("--wal-url")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    sources = args.sources.split(",")
    load = Path("/proc/loadavg").read_text().split()[:3]
    summary: dict[str, Any] = {"loadavg_before": load}
    http = [_http(api, args.http_records) for api in ("jira", "salesforce") if api in sources]
    if http:
        summary |= _http_report(http)
    results = _sql(args, summary) if "sql" in sources else []
    summary["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps(summary))
    name = "connectors.json" if args.wal_memory == "batch" else "connectors-server-memory.json"
    out = write_json(
        RESULTS / name,
        {"machine": platform.node(), "cpus": os.cpu_count(), "results": results, "http": http,
         "summary": summary},
    )  # fmt: skip
    log(f"wrote {out}")


def _sql(args: argparse.Namespace, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The SQL strategies at every size (fills ``summary`` with the ratios)."""
    results: list[dict[str, Any]] = []
    strategies, mem = args.strategies.split(","), args.wal_memory
    summary["wal_memory"] = mem
    for size in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-conn-") as tmp:
            data_dir = Path(tmp)
            wal_url = f"sqlite:///{data_dir / 'wal.db'}"
            log(f"{size:,} rows: filling the source")
            url, db = _source(args.pg_url, size)
            try:
                _register(wal_url, url)
                first = {s: _poll(data_dir, wal_url, s, None, mem) for s in strategies}
                changed = _change_one_percent(url)
                for strategy in strategies:
                    log(f"{size:,} rows: {strategy} incremental ({changed} changed)")
                    again = _poll(data_dir, wal_url, strategy, None, mem)
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
         p["records_per_s"], p["cpu_s"], p.get("jvm_cpu_s") or "-", p["peak_rss_mb"],
         p["anon_peak_mb"], p["jvm_peak_mb"] or "-"]
        for r in results
        for phase, p in (("initial", r["initial"]), ("1% changed", r["incremental"]))
    ]  # fmt: skip
    headers = ["rows", "strategy", "poll", "s", "records", "deltas", "rec/s", "cpu s", "jvm cpu s",
               "rss MB", "anon MB", "jvm MB"]  # fmt: skip
    print(table(headers, rows))
    for r in results:
        for phase, p in (("initial", r["initial"]), ("1% changed", r["incremental"])):
            if p.get("steps"):
                spent = ", ".join(f"{k} {v} s" for k, v in p["steps"].items())
                log(f"{r['size']:,} rows {r['strategy']} {phase}: {spent}")
    by = {(r["size"], r["strategy"]): r for r in results}
    sizes = sorted({r["size"] for r in results})
    if len(sizes) > 1:
        small, big = sizes[0], sizes[-1]
        for strategy in strategies:
            for metric in ("peak_rss_mb", "anon_peak_mb"):
                peaks = [
                    max(by[(n, strategy)][p][metric] for p in ("initial", "incremental"))
                    for n in (small, big)
                ]
                ratio = round(peaks[1] / peaks[0], 2)
                summary[f"{strategy}_{metric.removesuffix('_mb')}_ratio_{big}_vs_{small}"] = ratio
        if "diff" in strategies:
            diff_s = by[(big, "diff")]["incremental"]["seconds"]
            summary[f"diff_incremental_seconds_{big}"] = diff_s
    return results


if __name__ == "__main__":
    main()
