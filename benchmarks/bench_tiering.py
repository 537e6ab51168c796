"""Hot WAL retention under sustained pushes: the WAL stays bounded, pushes stay flat.

Pushes batches of deltas (default 500) through the real :class:`SyncService` into a real WAL
(SQLite by default, ``--backend postgres``) — updates spread over a fixed pool of rows (steady
load: row state does not grow), each delta with a new id — up to ``--total`` deltas (default
1M). A simulated clock advances ``--ms-per-delta`` per delta (default 1 ms: 1M deltas = 1 000 s
of traffic), which is what the retention ages are measured against. With retention on, a
lifecycle thread runs concurrently with the pushes, as the scheduled job does: every
``--trim-every`` seconds of wall time it moves the flush watermark to the head (what a flush
does after its lake commit — the lake itself is not part of this measurement; the lake's
watermark is taken equal to it) and runs the lifecycle's trim
(:func:`lakesync_platform.pipeline.lifecycle.trim_wal`) with ``--retention`` seconds of entries
and ``--dedup-retention`` seconds of delta ids.

At every ``--report-every`` deltas pushed (default 100k) it records: push throughput of the
window (deltas/s of wall time and per CPU second of the process), push latency (p50, p99, max),
entries and delta ids in the WAL, bytes on disk (SQLite: the file plus its ``-wal`` journal;
PostgreSQL: the WAL's tables) and SQLite's free pages, and the trim's longest batch (how long
pushes may wait behind it). ``--modes retention,none`` runs the same load without retention
too, side by side. Prints a table per mode and writes ``benchmarks/results/tiering.json``.

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_tiering.py                      # 1M, SQLite, ~3-5 min
    .venv/bin/python benchmarks/bench_tiering.py --total 200000 --report-every 50000
    .venv/bin/python benchmarks/bench_tiering.py --backend postgres --modes retention,none
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.backends import PostgresBackend, SqliteBackend
from benchmarks.harness.corpus import order_update
from benchmarks.harness.output import RESULTS, fmt_count, log, table, write_json
from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.pipeline.lifecycle import trim_wal
from lakesync_platform.settings import RetentionSettings
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

GW = "bench"
START_MS = 1_767_000_000_000


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Lifecycle(threading.Thread):
    """The scheduled job, compressed: flush watermark to the head, then trim, every period."""

    def __init__(
        self, wal: WriteAheadLog, clock: list[int], policy: RetentionSettings, every_s: float
    ) -> None:
        super().__init__(name="lifecycle", daemon=True)
        self.wal, self.clock, self.policy, self.every_s = wal, clock, policy, every_s
        self.stop = threading.Event()
        self.runs = 0
        self.entries = 0
        self.ids = 0
        self.longest_run_s = 0.0

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.once()

    def once(self) -> None:
        head = self.wal.max_cursor(GW)
        self.wal.set_flush_watermark(GW, head)
        started = time.perf_counter()
        entries, ids = trim_wal(self.wal, GW, head, self.policy, self.clock[0])
        self.longest_run_s = max(self.longest_run_s, time.perf_counter() - started)
        self.runs += 1
        self.entries += entries
        self.ids += ids


def _batch(n: int, first: int, pool: int, clock_ms: int) -> list[RowDelta]:
    return [order_update(k, pool, encode(clock_ms, k % 65_536)) for k in range(first, first + n)]


def _counts(wal: WriteAheadLog) -> tuple[int, int]:
    with wal.read() as conn:
        ids = conn.exec_driver_sql(
            wal._sql("SELECT count(*) FROM wal_delta_ids WHERE gateway_id = ?"), (GW,)
        ).scalar()
    return wal.stats(GW).log_entries, int(ids or 0)


def _file(url: str, suffix: str) -> int | None:
    """Size of the SQLite WAL's file (``""``) or journal (``"-wal"``); ``None`` on PostgreSQL."""
    if not url.startswith("sqlite:///"):
        return None
    path = Path(url.removeprefix("sqlite:///") + suffix)
    return path.stat().st_size if path.exists() else 0


def _pg_tables(wal: WriteAheadLog) -> dict[str, int] | None:
    """PostgreSQL: bytes of the log, the ids and the rows tables (indexes included)."""
    if wal.dialect != "postgresql":
        return None
    with wal.read() as conn:
        return {
            name: int(conn.exec_driver_sql(f"SELECT pg_total_relation_size('{name}')").scalar())
            for name in ("wal_entries", "wal_delta_ids", "wal_rows")
        }


def run_mode(args: argparse.Namespace, url: str, retention: bool) -> list[dict[str, Any]]:
    """Push ``--total`` deltas; one record per ``--report-every``."""
    clock = [START_MS]
    wal = WriteAheadLog.open(url)
    service = SyncService(wal, clock=lambda: clock[0])
    policy = RetentionSettings(
        wal_age_s=args.retention, dedup_age_s=args.dedup_retention, batch=args.trim_batch
    )
    job = Lifecycle(wal, clock, policy, args.trim_every) if retention else None
    if job is not None:
        job.start()
    rows: list[dict[str, Any]] = []
    pushed = 0
    lat: list[float] = []
    window_start, cpu_start = time.perf_counter(), _cpu_s()
    try:
        while pushed < args.total:
            deltas = _batch(args.batch, pushed, args.pool, clock[0])
            started = time.perf_counter()
            service.push(GW, "bench", deltas)
            lat.append(time.perf_counter() - started)
            pushed += len(deltas)
            clock[0] += args.ms_per_delta * len(deltas)
            if pushed % args.report_every == 0:
                wall = time.perf_counter() - window_start
                cpu = _cpu_s() - cpu_start
                entries, ids = _counts(wal)
                used = wal.storage()
                lat.sort()
                rows.append(
                    {
                        "pushed": pushed,
                        "deltas_per_s": args.report_every / wall,
                        "deltas_per_cpu_s": args.report_every / cpu,
                        "p50_ms": 1000 * lat[len(lat) // 2],
                        "p99_ms": 1000 * lat[int(len(lat) * 0.99)],
                        "max_ms": 1000 * lat[-1],
                        "entries": entries,
                        "delta_ids": ids,
                        "bytes": used.bytes,
                        "db_bytes": _file(url, ""),
                        "journal_bytes": _file(url, "-wal"),
                        "free_bytes": used.free_bytes,
                        "pg_tables": _pg_tables(wal),
                        "log_floor": wal.log_floor(GW),
                        "trim_runs": job.runs if job else 0,
                        "longest_trim_s": job.longest_run_s if job else 0.0,
                        "loadavg": os.getloadavg()[0],
                    }
                )
                log(
                    f"{'retention' if retention else 'none'}: {fmt_count(pushed)} pushed, "
                    f"{rows[-1]['deltas_per_s']:,.0f} deltas/s, {entries:,} entries, "
                    f"{used.bytes / 1e6:,.1f} MB"
                )
                lat = []
                window_start, cpu_start = time.perf_counter(), _cpu_s()
    finally:
        if job is not None:
            job.stop.set()
            job.join()
        wal.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--total", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=500, help="deltas per push")
    parser.add_argument("--pool", type=int, default=50_000, help="rows the updates spread over")
    parser.add_argument("--report-every", type=int, default=100_000)
    parser.add_argument("--ms-per-delta", type=int, default=1, help="simulated ms per delta")
    parser.add_argument("--retention", type=float, default=60.0, help="entry retention (s)")
    parser.add_argument("--dedup-retention", type=float, default=120.0, help="id retention (s)")
    parser.add_argument("--trim-every", type=float, default=1.0, help="lifecycle period (wall s)")
    parser.add_argument("--trim-batch", type=int, default=RetentionSettings().batch)
    parser.add_argument("--modes", default="retention", help="retention,none")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--out", default=str(RESULTS / "tiering.json"))
    args = parser.parse_args()
    if args.total % args.report_every or args.report_every % args.batch:
        parser.error("--total must be a multiple of --report-every, and that of --batch")

    workdir = Path(tempfile.mkdtemp(prefix="bench_tiering_"))
    backend = SqliteBackend(workdir) if args.backend == "sqlite" else PostgresBackend(args.pg_url)
    results: dict[str, Any] = {
        "args": vars(args),
        "loadavg_start": os.getloadavg(),
        "modes": {},
    }
    for mode in args.modes.split(","):
        url = backend.fresh(mode)
        try:
            results["modes"][mode] = run_mode(args, url, retention=mode == "retention")
        finally:
            backend.drop(url)
    results["loadavg_end"] = os.getloadavg()
    for mode, rows in results["modes"].items():
        print(f"\n{args.backend}, {mode}: {args.batch}-delta pushes over {args.pool:,} rows")
        print(
            table(
                ["pushed", "deltas/s", "per CPU s", "p50 ms", "p99 ms", "max ms", "entries",
                 "ids", "MB on disk", "db MB", "journal MB", "MB free", "longest trim s",
                 "load"],
                [
                    [
                        fmt_count(r["pushed"]), r["deltas_per_s"], r["deltas_per_cpu_s"],
                        r["p50_ms"], r["p99_ms"], r["max_ms"], r["entries"], r["delta_ids"],
                        r["bytes"] / 1e6, (r["db_bytes"] or 0) / 1e6,
                        (r["journal_bytes"] or 0) / 1e6, (r["free_bytes"] or 0) / 1e6,
                        r["longest_trim_s"],
                        r["loadavg"],
                    ]
                    for r in rows
                ],
            )
        )  # fmt: skip
        if rows and rows[0]["pg_tables"]:
            print("PostgreSQL tables (MB): entries / ids / rows")
            for r in rows:
                t = r["pg_tables"]
                print(
                    f"  {fmt_count(r['pushed'])}: {t['wal_entries'] / 1e6:.1f} / "
                    f"{t['wal_delta_ids'] / 1e6:.1f} / {t['wal_rows'] / 1e6:.1f}"
                )
        if len(rows) >= 2:
            for key, what in (("deltas_per_s", "wall"), ("deltas_per_cpu_s", "CPU")):
                first = statistics.median(r[key] for r in rows[:3])
                last = statistics.median(r[key] for r in rows[-3:])
                print(f"throughput per {what} second, last 3 windows / first 3: {last / first:.2f}")
    print(f"load average: {results['loadavg_start']} → {results['loadavg_end']}")
    print(f"wrote {write_json(args.out, results)}")


if __name__ == "__main__":
    main()
