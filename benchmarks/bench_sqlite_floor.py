"""SQLite floor of a push: the statements a 500-delta push of new rows runs, without the gateway.

The gateway benchmark's SQLite push slows down between 10k and 1M stored deltas. This script
measures how much of that is SQLite's own: it creates the WAL's tables with the product's
migrations (the same keys and indexes), then replays the push's write pattern with the
``sqlite3`` module on one connection — dedup ids claimed, row states looked up, log entries and
new rows inserted, the gateway row updated, one ``BEGIN IMMEDIATE … COMMIT`` per push, the
connection settings of ``WriteAheadLog`` (``synchronous=FULL``, no automatic checkpoint) and a
passive checkpoint every 50 ms on a second connection, as the gateway's checkpoint thread does.
No HTTP, no Python-side merge, no JSON decoding.

All sizes are filled first, then timed in interleaved rounds of 8 pushes each, so that the
machine's speed drift weighs on every size alike; before each round the WAL is checkpointed
and the disk flushed (``sync``), so no round pays for another's pending writes. It prints, per
stored size, microseconds per delta for each step and in total, and writes them to
``benchmarks/results/sqlite_floor.json`` (``--out``). ``--synchronous``, ``--page-size`` and
``--checkpoint-every`` change the corresponding setting for experiments (the product uses FULL,
4096 and 0.05 s).

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_sqlite_floor.py                  # 10k and 1M, ~3 min
    .venv/bin/python benchmarks/bench_sqlite_floor.py --sizes 10000,100000
    .venv/bin/python benchmarks/bench_sqlite_floor.py --synchronous OFF   # no fsync at all
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.output import RESULTS, write_json
from lakesync_platform.wal import tables

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


@dataclass(frozen=True)
class Settings:
    """What an experiment may change; the defaults are the product's."""

    page_size: int = 4096
    synchronous: str = "FULL"
    checkpoint_every: float = 0.05  # seconds between passive checkpoints


def connect(path: Path, settings: Settings) -> sqlite3.Connection:
    """A connection configured as ``WriteAheadLog`` configures its writers."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in (
        "journal_mode=WAL",
        f"synchronous={settings.synchronous}",
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


class Store:
    """One WAL database filled with ``stored`` deltas, its pusher and its checkpoint thread."""

    def __init__(self, work: Path, stored: int, settings: Settings) -> None:
        self.stored = stored
        self.path = work / f"floor_{stored}.db"
        with sqlite3.connect(self.path) as first:  # the page size is fixed by the first write
            first.execute(f"PRAGMA page_size={settings.page_size}")
            first.execute("VACUUM")
        engine = create_engine(f"sqlite:///{self.path}")
        with engine.begin() as conn:
            tables.migrate(conn, 0)
            conn.exec_driver_sql(
                "INSERT INTO wal_gateways (gateway_id, last_cursor, appended_bytes,"
                " flush_watermark, flushed_bytes, created_ms) VALUES (?, 0, 0, 0, 0, 0)",
                (GW,),
            )
        engine.dispose()
        self.settings = settings
        self.conn = connect(self.path, settings)
        self.pusher = Pusher(self.conn, seed=stored)
        t = time.perf_counter()
        for _ in range(stored // BATCH):
            self.pusher.push()
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.fill_s = time.perf_counter() - t
        self.times: list[float] = []
        self.checkpointer = connect(self.path, settings)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._checkpoints, daemon=True)
        self.thread.start()

    def _checkpoints(self) -> None:
        while not self.stop.wait(self.settings.checkpoint_every):
            self.checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def push(self, times: int, *, timed: bool = True) -> None:
        for _ in range(times):
            t = time.perf_counter()
            self.pusher.push()
            if timed:
                self.times.append(time.perf_counter() - t)

    def settle(self) -> None:
        """Checkpoint everything and let the disk flush, so a round starts from a clean state
        (the previous round's pending writes would otherwise slow down this one)."""
        # RESTART, not TRUNCATE: the -wal file keeps its size, as in steady operation (a
        # truncated one must grow again, and every commit would then also sync its metadata).
        self.conn.execute("PRAGMA wal_checkpoint(RESTART)")
        os.sync()
        time.sleep(0.2)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.checkpointer.close()
        self.conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def result(self) -> dict[str, Any]:
        deltas = len(self.times) * BATCH
        spent = self.pusher.spent
        return {
            "stored": self.stored,
            "fill_s": round(self.fill_s, 1),
            "pushes": len(self.times),
            "us_per_delta": round(sum(self.times) / deltas * 1e6, 1),
            "median_push_ms": round(statistics.median(self.times) * 1e3, 2),
            "steps_us_per_delta": {k: round(v / deltas * 1e6, 1) for k, v in spent.items()},
        }


def measure(work: Path, sizes: list[int], pushes: int, settings: Settings) -> list[dict[str, Any]]:
    """Fill one WAL per size, then time ``pushes`` pushes on each, interleaved in rounds of
    ``_ROUND`` pushes so that the machine's drift weighs on every size alike."""
    stores = []
    try:
        for stored in sizes:
            stores.append(Store(work, stored, settings))
        for store in stores:  # warm the caches
            store.push(10, timed=False)
            store.pusher.spent = dict.fromkeys(STEPS, 0.0)
        for _ in range(max(1, pushes // _ROUND)):
            for store in stores:
                store.settle()
                store.push(_ROUND)
        return [store.result() for store in stores]
    finally:
        for store in stores:
            store.close()


_ROUND = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--pushes", type=int, default=80)
    parser.add_argument("--page-size", type=int, default=4096)
    parser.add_argument("--checkpoint-every", type=float, default=0.05, help="seconds")
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL", "OFF"), default="FULL")
    parser.add_argument("--out", default=str(RESULTS / "sqlite_floor.json"))
    args = parser.parse_args()
    settings = Settings(args.page_size, args.synchronous, args.checkpoint_every)
    sizes = [int(v) for v in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="lakesync-floor-") as tmp:
        results = measure(Path(tmp), sizes, args.pushes, settings)
    for r in results:
        steps = "  ".join(f"{k} {v}" for k, v in r["steps_us_per_delta"].items())
        print(f"{r['stored']:>9,} stored: {r['us_per_delta']} us/delta ({steps})", flush=True)
    base = results[0]["us_per_delta"]
    for r in results[1:]:
        r["slowdown_vs_first"] = round(r["us_per_delta"] / base - 1, 3)
        first = results[0]["stored"]
        print(f"{r['stored']:>9,} stored: {r['slowdown_vs_first']:.0%} slower than {first:,}")
    out = write_json(args.out, {"batch": BATCH, **asdict(settings), "results": results})
    print(f"JSON: {out}")


if __name__ == "__main__":
    main()
