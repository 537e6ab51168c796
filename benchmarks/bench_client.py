"""Client SDK benchmark: local write latency and initial pull throughput.

    .venv/bin/python benchmarks/bench_client.py [--rows 10000 100000] [--inserts 5000]

Measures

* ``tracker.insert`` latency (p50 / p99 µs) on a file-backed client: user row + column stamps +
  outbox entry in one SQLite transaction (WAL journal, ``synchronous=NORMAL``);
* the time for a brand-new client to receive N rows through ``pull`` (all pages, applied and
  committed page by page), through the in-process transport and through HTTP against a real
  gateway process (uvicorn, SQLite WAL, auth off).

Prints the figures and writes ``benchmarks/results/client.json``.
Targets (issue 3): insert p50 ≤ 200 µs; 100k rows received in ≤ 20 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.items import GW, SCHEMA, now_ms, seed
from benchmarks.harness.output import RESULTS, write_json
from benchmarks.harness.snapshot import ROOT
from benchmarks.harness.stats import pct
from lakesync_platform.client import (
    HttpTransport,
    InProcessTransport,
    LakeSyncClient,
    Transport,
    create_client,
)
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog


def bench_insert(n: int, tmp: Path) -> dict[str, float]:
    """Latency of ``tracker.insert`` (with the outbox) on a file-backed client."""
    client = create_client(
        name="w", schemas=[SCHEMA], client_id="writer", path=tmp / "writer.db", auto_sync_ms=0
    )
    samples: list[float] = []
    try:
        for i in range(200):  # warm up
            client.tracker.insert("items", f"warm{i}", {"title": "w", "qty": i})
        for i in range(n):
            data = {"title": f"item {i}", "qty": i, "done": False, "tags": ["a", "b"]}
            start = time.perf_counter_ns()
            client.tracker.insert("items", f"r{i}", data)
            samples.append((time.perf_counter_ns() - start) / 1000)
        assert client.coordinator.queue_depth() == n + 200
    finally:
        client.close()
    return {
        "n": n,
        "p50_us": round(statistics.median(samples), 1),
        "p99_us": round(pct(samples, 99), 1),
        "mean_us": round(statistics.fmean(samples), 1),
    }


def time_initial_pull(transport: Transport, path: Path, rows: int) -> float:
    """Seconds for a new client to pull and apply every row."""
    client: LakeSyncClient = create_client(
        name="reader",
        schemas=[SCHEMA],
        client_id=f"reader-{path.stem}",
        path=path,
        transport=transport,
        auto_sync_ms=0,
    )
    try:
        start = time.perf_counter()
        received = client.coordinator.pull()
        elapsed = time.perf_counter() - start
        held = client.db.query_tuples("SELECT count(*) FROM items")[0][0]
        assert received == rows and held == rows, (received, held)
    finally:
        client.close()
    return round(elapsed, 2)


def bench_pull(rows: int, tmp: Path, page_size: int) -> dict[str, Any]:
    """Initial pull of ``rows`` rows, in-process and over HTTP."""
    wal_url = f"sqlite:///{tmp / f'wal-{rows}.db'}"
    wal = WriteAheadLog.open(wal_url)
    t0 = time.perf_counter()
    seed(wal, rows)
    seeded = time.perf_counter() - t0
    service = SyncService(wal, now_ms)
    in_process = time_initial_pull(InProcessTransport(service, GW), tmp / f"inproc-{rows}.db", rows)
    wal.close()
    gateway = GatewayProcess(  # auth off: the secret is never asked for
        tmp / f"gw-{rows}", "unused", wal_url, extra_args=["--no-auth"], cwd=ROOT
    )
    with gateway:
        http = time_initial_pull(
            HttpTransport(gateway.url, GW, timeout_s=60), tmp / f"http-{rows}.db", rows
        )
    return {
        "rows": rows,
        "page_size": page_size,
        "seed_s": round(seeded, 2),
        "in_process_s": in_process,
        "http_s": http,
        "http_rows_per_s": round(rows / http),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--inserts", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=RESULTS / "client.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        insert = bench_insert(args.inserts, tmp)
        print(
            f"tracker.insert  n={insert['n']}  p50={insert['p50_us']} µs  "
            f"p99={insert['p99_us']} µs  mean={insert['mean_us']} µs"
        )
        pulls = []
        for rows in args.rows:
            result = bench_pull(rows, tmp, page_size=1000)
            pulls.append(result)
            print(
                f"initial pull    rows={rows:>7}  in-process={result['in_process_s']} s  "
                f"http={result['http_s']} s  ({result['http_rows_per_s']} rows/s over HTTP)"
            )
    report = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "insert": insert,
        "initial_pull": pulls,
        "targets": {"insert_p50_us": 200, "pull_100k_s": 20},
    }
    write_json(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
