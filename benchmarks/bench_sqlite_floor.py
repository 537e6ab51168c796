"""SQLite floor of a push: the statements a 500-delta push of new rows runs, without the gateway.

The gateway benchmark's SQLite push slows down between 10k and 1M stored deltas. This script
measures how much of that is SQLite's own: it creates the WAL's tables with the product's
migrations (the same keys and indexes), then replays the push's write pattern with the
``sqlite3`` module on one connection — dedup ids claimed, row states looked up, log entries and
new rows inserted, the gateway row updated, one ``BEGIN IMMEDIATE … COMMIT`` per push, the
connection settings of ``WriteAheadLog`` (``synchronous=FULL``, no automatic checkpoint) and a
passive checkpoint every 50 ms on a second connection, as the gateway's checkpoint thread does.
No HTTP, no Python-side merge, no JSON decoding.

It prints, per stored size, microseconds per delta for each step and in total, and writes them
to ``benchmarks/results/sqlite_floor.json`` (``--out``).

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_sqlite_floor.py                  # 10k and 1M, ~2 min
    .venv/bin/python benchmarks/bench_sqlite_floor.py --sizes 10000,100000
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lakesync_platform.wal import tables  # noqa: E402

GW = "bench"
BATCH = 500
STATE = json.dumps(
    {
        "c": {
            "customer": ["Ada Lovelace", 117654507122196480, "bench-client"],
            "amount": [2364.17, 117654507122196480, "bench-client"],
            "quantity": [40, 117654507122196480, "bench-client"],
            "status": ["packed", 117654507122196480, "bench-client"],
        },
        "dh": 0,
        "dc": "",
    },
    separators=(",", ":"),
)
COLUMNS = json.dumps(
    [
        {"column": "customer", "value": "Ada Lovelace"},
        {"column": "amount", "value": 2364.17},
        {"column": "quantity", "value": 40},
        {"column": "status", "value": "packed"},
    ],
    separators=(",", ":"),
)
STEPS = ("claim_ids", "load_rows", "insert", "commit")


def connect(path: Path) -> sqlite3.Connection:
    """A connection configured as ``WriteAheadLog`` configures its writers."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in (
        "journal_mode=WAL",
        "synchronous=FULL",
        "cache_size=-131072",
        "mmap_size=1073741824",
        "wal_autocheckpoint=0",
        "temp_store=MEMORY",
    ):
        conn.execute("PRAGMA " + pragma)
    return conn


class Pusher:
    """Replays pushes of ``BATCH`` new rows; keeps per-step time when ``timed``."""

    def __init__(self, conn: sqlite3.Connection, seed: int) -> None:
        self.conn = conn
        self.rnd = random.Random(seed)
        row = conn.execute("SELECT last_cursor FROM wal_gateways WHERE gateway_id = ?", (GW,))
        self.cursor = row.fetchone()[0]
        self.spent = dict.fromkeys(STEPS, 0.0)

    def push(self) -> None:
        rnd, conn, n = self.rnd, self.conn, BATCH
        row_ids = [str(uuid.UUID(int=rnd.getrandbits(128), version=4)) for _ in range(n)]
        keys = [f"orders:{r}" for r in row_ids]
        hlc = (time.time_ns() // 1_000_000) << 16
        ids = [f"{rnd.getrandbits(256):064x}" for _ in range(n)]
        base = self.cursor
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO wal_delta_ids (gateway_id, hlc, delta_id) VALUES "
            + ",".join(["(?1,?,?)"] * n)
            + " ON CONFLICT DO NOTHING RETURNING hlc, delta_id",
            (GW, *[v for i in range(n) for v in (hlc + i, ids[i])]),
        ).fetchall()
        t1 = time.perf_counter()
        conn.execute(
            "SELECT row_key, state FROM wal_rows WHERE gateway_id = ? AND row_key IN ("
            + ",".join("?" * n)
            + ")",
            (GW, *keys),
        ).fetchall()
        t2 = time.perf_counter()
        conn.executemany(
            "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op, client_id,"
            " hlc, columns, ingest_ms, size) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    GW,
                    base + i + 1,
                    ids[i],
                    "orders",
                    row_ids[i],
                    "INSERT",
                    "bench-client",
                    hlc + i,
                    COLUMNS,
                    0,
                    200,
                )
                for i in range(n)
            ],
        )
        conn.executemany(
            "INSERT INTO wal_rows (gateway_id, row_key, tbl, row_id, state, live, position)"
            " VALUES (?,?,?,?,?,?,?)",
            [(GW, keys[i], "orders", row_ids[i], STATE, 1, base + i + 1) for i in range(n)],
        )
        conn.execute("UPDATE wal_gateways SET last_cursor = ? WHERE gateway_id = ?", (base + n, GW))
        t3 = time.perf_counter()
        conn.execute("COMMIT")
        t4 = time.perf_counter()
        self.cursor += n
        for step, dt in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            self.spent[step] += dt


def measure(work: Path, stored: int, pushes: int) -> dict[str, Any]:
    """Fill a fresh WAL with ``stored`` deltas, then time ``pushes`` pushes."""
    path = work / f"floor_{stored}.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        tables.migrate(conn, 0)
        conn.exec_driver_sql(
            "INSERT INTO wal_gateways (gateway_id, last_cursor, appended_bytes, flush_watermark,"
            " flushed_bytes, created_ms) VALUES (?, 0, 0, 0, 0, 0)",
            (GW,),
        )
    engine.dispose()
    conn = connect(path)
    pusher = Pusher(conn, seed=stored)
    t = time.perf_counter()
    for _ in range(stored // BATCH):
        pusher.push()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    fill_s = time.perf_counter() - t

    checkpointer = connect(path)
    stop = threading.Event()

    def checkpoints() -> None:
        while not stop.wait(0.05):
            checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    thread = threading.Thread(target=checkpoints, daemon=True)
    thread.start()
    try:
        for _ in range(10):  # warm the caches
            pusher.push()
        pusher.spent = dict.fromkeys(STEPS, 0.0)
        times = []
        for _ in range(pushes):
            t = time.perf_counter()
            pusher.push()
            times.append(time.perf_counter() - t)
    finally:
        stop.set()
        thread.join()
        checkpointer.close()
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    deltas = pushes * BATCH
    return {
        "stored": stored,
        "fill_s": round(fill_s, 1),
        "pushes": pushes,
        "us_per_delta": round(sum(times) / deltas * 1e6, 1),
        "median_push_ms": round(statistics.median(times) * 1e3, 2),
        "steps_us_per_delta": {k: round(v / deltas * 1e6, 1) for k, v in pusher.spent.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--pushes", type=int, default=80)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sqlite_floor.json"))
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="lakesync-floor-") as tmp:
        for stored in (int(s) for s in args.sizes.split(",")):
            r = measure(Path(tmp), stored, args.pushes)
            results.append(r)
            steps = "  ".join(f"{k} {v}" for k, v in r["steps_us_per_delta"].items())
            print(f"{stored:>9,} stored: {r['us_per_delta']} us/delta ({steps})", flush=True)
    base = results[0]["us_per_delta"]
    for r in results[1:]:
        r["slowdown_vs_first"] = round(r["us_per_delta"] / base - 1, 3)
        first = results[0]["stored"]
        print(f"{r['stored']:>9,} stored: {r['slowdown_vs_first']:.0%} slower than {first:,}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"batch": BATCH, "results": results}, indent=2))
    print(f"JSON: {out}")


if __name__ == "__main__":
    main()
