"""The embedded SQLite WAL's ``-wal`` journal under a sustained push load, and after it.

A round pushes batches of ``--batch`` deltas (updates spread over a pool of ``--pool`` rows,
each delta with a new id) from ``--writers`` threads for ``--seconds`` through the real
:class:`SyncService` into a fresh SQLite WAL, while ``--readers`` threads pull pages (a pull
holds a read mark on the journal, as the gateway's do), and samples the size of ``wal.db-wal``
every 20 ms. Then the load stops and the size is sampled ``--idle`` seconds more; then one more
push of one delta (the first write after the load) and the size after it; then the WAL is
closed. Reported per round: push throughput (deltas per wall second and per CPU second of the
process), push latency, the journal's peak size during the load, its size when the load ended,
after the idle wait and after the next push, and the database file's size.

``--code DIR,DIR`` compares product trees side by side: each round runs in a child process on
one tree, the trees alternating (each round starts with the next one), ``--rounds`` rounds
each; medians are printed. An export of
``main`` to compare against: ``git archive main | tar -x -C /tmp/lakesync-main``.

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_wal_journal.py                       # this tree, 3 rounds
    .venv/bin/python benchmarks/bench_wal_journal.py --code /tmp/lakesync-main,. --seconds 15
Results: a table on stdout, JSON in ``benchmarks/results/wal_journal.json`` (``--out``).
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
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.corpus import order_update
from benchmarks.harness.output import RESULTS, log, table, write_json

GW = "bench"
START_MS = 1_767_000_000_000
REPO = Path(__file__).resolve().parents[1]

CHILD_ARGS = ("seconds", "idle", "writers", "readers", "batch", "pool")
"""The flags a round takes (passed on to its child process)."""
FIELDS = (
    ("deltas_per_s", "deltas/s"),
    ("deltas_per_cpu_s", "per CPU s"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("peak_journal_mb", "peak journal MB"),
    ("journal_at_end_mb", "at load end"),
    ("journal_idle_mb", "after idle"),
    ("journal_next_push_mb", "after next push"),
    ("db_mb", "db MB"),
)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def run_round(args: argparse.Namespace) -> dict[str, Any]:
    """One round in this process, on the product code first on ``sys.path``."""
    from lakesync_platform.core.delta import RowDelta
    from lakesync_platform.core.hlc import encode
    from lakesync_platform.sync.service import SyncService
    from lakesync_platform.wal.store import WriteAheadLog

    folder = Path(tempfile.mkdtemp(prefix="bench-wal-journal-"))
    db = folder / "wal.db"
    journal = folder / "wal.db-wal"
    wal = WriteAheadLog.open(f"sqlite:///{db}")
    clock = [START_MS]
    service = SyncService(wal, clock=lambda: clock[0])
    counter = [0]
    lock = threading.Lock()

    def batch(n: int) -> list[RowDelta]:
        with lock:
            first = counter[0]
            counter[0] += n
        return [
            order_update(k, args.pool, encode(START_MS + k // 60_000, k % 60_000))
            for k in range(first, first + n)
        ]

    stop = threading.Event()
    loading = threading.Event()
    loading.set()
    samples: list[tuple[float, int, bool]] = []
    latencies: list[float] = []

    def sampler() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), _size(journal), loading.is_set()))
            time.sleep(0.02)

    def writer() -> None:
        while loading.is_set():
            deltas = batch(args.batch)
            started = time.perf_counter()
            service.push(GW, "bench", deltas)
            latencies.append(time.perf_counter() - started)

    def reader(i: int) -> None:  # a client following the log, as a polling client does
        since = 0
        while loading.is_set():
            since = service.pull(GW, f"reader-{i}", since, 1000).server_hlc
            time.sleep(0.05)

    service.push(GW, "bench", batch(args.batch))  # the table exists before the clock starts
    threads = [threading.Thread(target=sampler, daemon=True)]
    threads += [threading.Thread(target=writer, daemon=True) for _ in range(args.writers)]
    threads += [
        threading.Thread(target=reader, args=(i,), daemon=True) for i in range(args.readers)
    ]
    pushed_before = counter[0]
    cpu0, wall0 = _cpu_s(), time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    loading.clear()
    for t in threads[1:]:
        t.join()
    wall, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
    pushed = counter[0] - pushed_before
    at_end = _size(journal)
    time.sleep(args.idle)
    idle = _size(journal)
    service.push(GW, "bench", batch(1))
    next_push = _size(journal)
    stop.set()
    threads[0].join()
    with wal.read() as conn:
        limit = conn.exec_driver_sql("PRAGMA journal_size_limit").scalar()
    db_bytes = _size(db)
    wal.close()
    after_close = _size(journal)
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    latencies.sort()
    mb = 1e6
    return {
        "deltas": pushed,
        "seconds": wall,
        "deltas_per_s": pushed / wall,
        "deltas_per_cpu_s": pushed / cpu,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "peak_journal_mb": max(size for _, size, load in samples if load) / mb,
        "journal_at_end_mb": at_end / mb,
        "journal_idle_mb": idle / mb,
        "journal_next_push_mb": next_push / mb,
        "journal_after_close_mb": after_close / mb,
        "db_mb": db_bytes / mb,
        "journal_size_limit": limit,
        "loadavg": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="load duration per round")
    ap.add_argument("--idle", type=float, default=3.0, help="seconds watched after the load")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--pool", type=int, default=50_000, help="rows the updates spread over")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per code tree")
    ap.add_argument("--code", default=".", help="comma-separated product trees to compare")
    ap.add_argument("--out", default=str(RESULTS / "wal_journal.json"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, str(Path(args.code).resolve()))
        print(json.dumps(run_round(args)))
        return
    trees = [Path(c).resolve() for c in args.code.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {str(t): [] for t in trees}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        for tree in trees[r % len(trees) :] + trees[: r % len(trees)]:  # each goes first in turn
            child = [f"--{k}={getattr(args, k)}" for k in CHILD_ARGS]
            out = subprocess.run(
                [sys.executable, __file__, *child, "--child", f"--code={tree}"],
                capture_output=True,
                text=True,
                check=False,
                cwd=tree,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
            if out.returncode != 0:
                sys.exit(f"round on {tree} failed:\n{out.stderr[-3000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            runs[str(tree)].append(result)
            log(
                f"round {r + 1} {tree.name or tree}: {result['deltas_per_s']:,.0f} deltas/s, "
                f"journal peak {result['peak_journal_mb']:.1f} MB, after idle "
                f"{result['journal_idle_mb']:.1f} MB"
            )
    rows = []
    for tree, results in runs.items():
        medians = [statistics.median(r[key] for r in results) for key, _ in FIELDS]
        rows.append([Path(tree).name or tree, *medians, results[0]["journal_size_limit"]])
    print(
        f"\n{args.writers} writers x {args.batch}-delta pushes, {args.readers} readers, "
        f"{args.seconds:.0f} s per round, medians of {args.rounds} rounds"
    )
    print(table(["code", *(label for _, label in FIELDS), "limit"], rows))
    load_after = os.getloadavg()
    print(f"load average: {load_before} → {load_after}")
    path = write_json(
        args.out,
        {
            "args": {k: v for k, v in vars(args).items() if k != "child"},
            "runs": runs,
            "loadavg": [load_before, load_after],
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
