"""The sync job's asset checks: their cost against the size of the lake, before and after.

For each state size (default 10k and 300k rows of the demo ``todos``, one insert each), a lake
is built — the inserts flushed, merged and materialised into a SQLite destination — then
``--updates`` (200) more entries over random rows go through the same three stages: the run
whose checks the sync job then executes. Each check is timed (``--repeat`` rounds, median):

* **before** — the checks as they were up to issue 27 (:mod:`benchmarks.harness.legacy_checks`,
  kept verbatim): every lake cursor into a Python set and every WAL entry paged through Python;
  the state table and the table's whole change log collected and replayed through
  ``core.merge``; the whole destination read back into a dict;
* **after** — the same checks over the latest flush's cursor range
  (``check_log_exactly_once``, ``check_state_matches_log``, ``check_destination_matches_state``):
  Spark aggregates and joins over the range, counts and a sample back;
* **audit** — the whole-lake audit (``audit_*``): the same checks over everything, streamed.

Ratio = before / after. Every round's outcome must pass. Each figure also records the CPU the
whole machine used meanwhile (``host_busy_cpu_s``, /proc/stat; 2 cores, shared).

Usage: ``python benchmarks/bench_checks.py [--sizes 10000,300000] [--updates 200]
[--repeat 3]``. Prints a table and writes ``benchmarks/results/checks.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_pipeline import fill_wal
from benchmarks.harness import legacy_checks
from benchmarks.harness.cpu import host_cpu
from benchmarks.harness.output import RESULTS, fmt_count, log, table, write_json
from lakesync_platform.core.hlc import encode
from lakesync_platform.pipeline.context import CheckOutcome, PipelineContext, spark_settings
from lakesync_platform.pipeline.flush import (
    audit_log_exactly_once,
    check_log_exactly_once,
    run_flush,
)
from lakesync_platform.pipeline.materialise import (
    audit_destination_matches_state,
    check_destination_matches_state,
    run_materialise,
)
from lakesync_platform.pipeline.state import (
    audit_state_matches_log,
    check_state_matches_log,
    run_state,
)
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.session import create_spark_session
from lakesync_platform.testing import demo_declarations_yaml
from lakesync_platform.wal.store import WriteAheadLog

ENCODE = msgspec.json.Encoder().encode
_INSERT = (
    "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op, client_id, hlc, "
    "columns, ingest_ms, size) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
)
BASE_MS = 1_760_000_000_000


def fill_rows(path: Path, gw: str, rows: int) -> str:
    """A WAL of ``rows`` inserts, one per row id (``row-0`` …); return its URL."""
    url = "sqlite:///" + str(path)
    WriteAheadLog.open(url).close()  # create + migrate
    conn = sqlite3.connect(path)
    with conn:
        batch = []
        for cursor in range(1, rows + 1):
            cols = [
                {"column": "title", "value": f"title {cursor}"},
                {"column": "completed", "value": cursor % 2 == 0},
                {"column": "priority", "value": cursor % 5},
            ]
            text = ENCODE(cols).decode()
            hlc = encode(BASE_MS + cursor // 4, cursor % 4)
            batch.append(
                (gw, cursor, uuid.uuid4().hex, "todos", f"row-{cursor - 1}", "INSERT", "c", hlc,
                 text, BASE_MS + cursor // 4, 60 + len(text))
            )  # fmt: skip
            if len(batch) == 50_000:
                conn.executemany(_INSERT, batch)
                batch.clear()
        conn.executemany(_INSERT, batch)
        conn.execute(
            "INSERT INTO wal_gateways (gateway_id, last_cursor, appended_bytes, "
            "flush_watermark, flushed_bytes, created_ms) VALUES (?, ?, ?, 0, 0, 0)",
            (gw, rows, rows * 100),
        )
    conn.close()
    return url


def _sync(ctx: PipelineContext, gw: str) -> None:
    run_flush(ctx, gw)
    run_state(ctx, gw)
    run_materialise(ctx, gw)


def _timed(repeat: int, check: Callable[[], CheckOutcome]) -> dict[str, Any]:
    """Median wall seconds of ``repeat`` rounds (each must pass) and the other CPU meanwhile."""
    seconds, busy = [], []
    for _ in range(repeat):
        cpu_before = host_cpu()[0]
        started = time.perf_counter()
        outcome = check()
        seconds.append(time.perf_counter() - started)
        busy.append(host_cpu()[0] - cpu_before)
        if not outcome.passed:
            raise SystemExit(f"a check failed: {outcome.description} {outcome.metadata}")
    return {
        "median_s": round(statistics.median(seconds), 3),
        "rounds_s": [round(s, 3) for s in seconds],
        "host_busy_cpu_s": round(statistics.median(busy), 2),
    }


CHECKS: dict[str, tuple[Any, Any, Any]] = {
    "exactly_once": (
        legacy_checks.check_log,
        lambda ctx, gw: check_log_exactly_once(ctx, gw),
        lambda ctx, gw: audit_log_exactly_once(ctx, gw),
    ),
    "matches_log_replay": (
        lambda ctx, gw: legacy_checks.check_state(ctx, gw, "todos"),
        lambda ctx, gw: check_state_matches_log(ctx, gw, "todos"),
        lambda ctx, gw: audit_state_matches_log(ctx, gw, "todos"),
    ),
    "matches_state": (
        lambda ctx, gw: legacy_checks.check_destination(ctx, gw, "local", "todos"),
        lambda ctx, gw: check_destination_matches_state(ctx, gw, "local", "todos"),
        lambda ctx, gw: audit_destination_matches_state(ctx, gw, "local", "todos"),
    ),
}


def measure(spark: Any, work: Path, rows: int, updates: int, repeat: int) -> dict[str, Any]:
    """Build a lake of ``rows`` state rows plus one run of ``updates`` entries; time the
    checks of that run before, after, and as the audit."""
    gw = "bench_" + uuid.uuid4().hex[:8]
    folder = work / gw
    (folder / "defs").mkdir(parents=True)
    declarations = (
        demo_declarations_yaml()
        .replace("gateway: demo", f"gateway: {gw}")
        .replace("${LAKESYNC_DATA_DIR}/destination.db", str(folder / "dest.db"))
    )
    (folder / "defs" / "todos.yaml").write_text(declarations)
    wal_path = folder / "wal.db"
    url = fill_rows(wal_path, gw, rows)
    settings = PipelineSettings(data_dir=work, wal_url=url, defs_dir=folder / "defs")
    ctx = PipelineContext(settings, spark=spark)
    try:
        log(f"{fmt_count(rows)} rows: first load …")
        _sync(ctx, gw)
        fill_wal(wal_path, gw, updates, rows, start=rows)
        log(f"{fmt_count(rows)} rows: a run of {updates} updates …")
        _sync(ctx, gw)
        out: dict[str, Any] = {"rows": rows, "updates": updates}
        for name, (before, after, audit) in CHECKS.items():
            log(f"{fmt_count(rows)} rows: {name} …")
            out[name] = {
                "before": _timed(repeat, lambda f=before: f(ctx, gw)),
                "after": _timed(repeat, lambda f=after: f(ctx, gw)),
                "audit": _timed(repeat, lambda f=audit: f(ctx, gw)),
            }
            out[name]["ratio"] = round(
                out[name]["before"]["median_s"] / out[name]["after"]["median_s"], 1
            )
        return out
    finally:
        ctx.close()


def main() -> None:
    """Run the benchmark, print the table and write ``benchmarks/results/checks.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,300000")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lakesync-bench-checks-"))
    try:
        settings = PipelineSettings(data_dir=work)
        spark = create_spark_session(spark_settings(settings), env=os.environ)
        measure(spark, work, 1_000, 20, 1)  # warm-up: JIT, catalog, code paths
        results = [
            measure(spark, work, int(n), args.updates, args.repeat) for n in args.sizes.split(",")
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        [fmt_count(r["rows"]), name, r[name]["before"]["median_s"], r[name]["after"]["median_s"],
         r[name]["ratio"], r[name]["audit"]["median_s"]]
        for r in results
        for name in CHECKS
    ]  # fmt: skip
    print(table(["state rows", "check", "before s", "after s", "before/after", "audit s"], lines))
    path = write_json(
        RESULTS / "checks.json",
        {"sizes": results, "updates": args.updates, "repeat": args.repeat,
         "loadavg_at_end": os.getloadavg()},
    )  # fmt: skip
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
