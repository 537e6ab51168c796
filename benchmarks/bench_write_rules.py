"""What checking writes against the sync rules costs a push (docs/gateway.md, "Security model").

The sync service (``SyncService.push``, no HTTP) on a SQLite WAL, side by side in one run:

* ``none``: no sync rules (every write allowed without a look);
* ``unrestricted``: filtering rules with ``"writes": "unrestricted"`` (the reference's push);
* ``checked``: the same rules, writes checked (the default) — every delta judged on the row
  before and after it.

Two kinds of batch: 500 new rows (the writer's shortcut, judged on the delta's columns) and 500
updates of rows the pusher owns (merged, then judged on both states). Each configuration gets
a fresh WAL; rounds alternate the configurations so machine drift weighs on each alike; the
figure is the median deltas/s over the rounds, and the ratio checked / unrestricted.

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_write_rules.py            # 5 rounds, ~1 min
    .venv/bin/python benchmarks/bench_write_rules.py --rounds 9 --pushes 40
Results: a table on stdout and JSON in benchmarks/results/write_rules.json (``--out``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.output import RESULTS, log, table, write_json
from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.sync_rules import parse_sync_rules
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

GW = "bench"
BATCH = 500
RULES: dict[str, Any] = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["orders"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        },
        {
            "name": "team",
            "tables": ["orders"],
            "filters": [{"column": "team", "op": "in", "value": "jwt:teams"}],
        },
    ],
}
MODES = ("none", "unrestricted", "checked")
CLAIMS = {"sub": "w1", "teams": ("red", "blue")}


def _delta(n: int, row: int, cols: dict[str, Any], op: str) -> RowDelta:
    hlc = encode(1_700_000_000_000 + n, 0)
    columns = tuple(ColumnDelta(k, v) for k, v in cols.items())
    return RowDelta(
        op,
        "orders",
        f"o{row}",
        "w1",
        columns,
        hlc,
        delta_id("w1", hlc, "orders", f"o{row}", columns),
    )


class Config:
    """One configuration's service, on its own WAL, with its own clock and row counter."""

    def __init__(self, mode: str, folder: Path) -> None:
        self.wal = WriteAheadLog.open(f"sqlite:///{folder / f'{mode}.db'}")
        self.now = [1_700_000_000_000]
        self.service = SyncService(self.wal, clock=lambda: self.now[0] + 10_000_000)
        if mode != "none":
            rules = dict(RULES, writes="unrestricted") if mode == "unrestricted" else RULES
            self.service.save_sync_rules(GW, parse_sync_rules(rules))
        self.n = 0
        self.rows = 0

    def batch(self, kind: str) -> list[RowDelta]:
        out = []
        for _ in range(BATCH):
            self.n += 1
            if kind == "insert":
                self.rows += 1
                cols = {"owner": "w1", "team": "red", "amount": self.n, "status": "new"}
                out.append(_delta(self.n, self.rows, cols, "INSERT"))
            else:  # update a row written before: merged, judged before and after
                row = (self.n * 7919) % max(self.rows, 1) + 1
                out.append(_delta(self.n, row, {"amount": self.n, "status": "paid"}, "UPDATE"))
        return out

    def push(self, deltas: list[RowDelta]) -> None:
        result = self.service.push(GW, "w1", deltas, claims=CLAIMS)
        assert not result.refused, result.refused[:1]

    def close(self) -> None:
        self.wal.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pushes", type=int, default=20, help="pushes of 500 per round and kind")
    ap.add_argument("--out", default=str(RESULTS / "write_rules.json"))
    args = ap.parse_args()
    rates: dict[tuple[str, str], list[float]] = {
        (m, k): [] for m in MODES for k in ("insert", "update")
    }
    with tempfile.TemporaryDirectory(prefix="bench-write-rules-") as tmp:
        configs = {m: Config(m, Path(tmp)) for m in MODES}
        try:
            for c in configs.values():  # a lake of rows to update, and warm caches
                for _ in range(4):
                    c.push(c.batch("insert"))
            for r in range(args.rounds):
                order = MODES if r % 2 == 0 else tuple(reversed(MODES))
                for kind in ("insert", "update"):
                    for mode in order:
                        c = configs[mode]
                        batches = [c.batch(kind) for _ in range(args.pushes)]
                        started = time.perf_counter()
                        for b in batches:
                            c.push(b)
                        rates[mode, kind].append(
                            BATCH * args.pushes / (time.perf_counter() - started)
                        )
                log(f"round {r + 1}/{args.rounds} done")
        finally:
            for c in configs.values():
                c.close()
    med = {key: statistics.median(v) for key, v in rates.items()}
    rows = [
        [
            kind,
            *(f"{med[m, kind]:,.0f}" for m in MODES),
            f"{med['checked', kind] / med['unrestricted', kind]:.3f}",
        ]
        for kind in ("insert", "update")
    ]
    print(table(["batch of 500", *(f"{m} deltas/s" for m in MODES), "checked/unrestricted"], rows))
    write_json(
        args.out,
        {
            "rounds": args.rounds,
            "pushes_per_round": args.pushes,
            "batch": BATCH,
            "median_deltas_per_s": {f"{m}/{k}": v for (m, k), v in med.items()},
            "all_deltas_per_s": {f"{m}/{k}": v for (m, k), v in rates.items()},
            "ratio_checked_unrestricted": {
                k: med["checked", k] / med["unrestricted", k] for k in ("insert", "update")
            },
        },
    )


if __name__ == "__main__":
    main()
