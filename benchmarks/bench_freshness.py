"""Freshness of ``lakesync dev``: push-ack → destination-row latency while the demo load runs.

Starts ``lakesync dev`` on a fresh data directory (gateway, Spark Connect server, Dagster UI,
the demo clients), waits until its first sync run has delivered, then pushes ``--probes`` probe
rows — one at a time, ``--gap`` seconds apart on average (randomised), each a new row of the
demo's ``todos`` table — and times each from the push's acknowledgement to the moment the row
is in the demo destination (``<data-dir>/destination.db``, polled every 20 ms). Afterwards it
reads every ``sync_demo`` run from Dagster's GraphQL API: how long the run waited from its
creation (the sensor's request) to its start (the run worker up), each step's seconds, and the
whole run.

    python benchmarks/bench_freshness.py [--probes 12] [--gap 4] [--warmup 60]

Prints p50 / p90 / max latency and the runs' medians; writes ``benchmarks/results/freshness.json``.
Targets (issue 27): p50 ≤ 5 s and max ≤ 15 s.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.output import RESULTS, log, table, write_json
from benchmarks.harness.snapshot import ROOT, git_info
from benchmarks.harness.stats import pct
from lakesync_platform.core.hlc import encode

_RUNS = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter, limit: 500) {
    ... on Runs { results { runId status creationTime startTime endTime
                            stepStats { stepKey startTime endTime status } } }
  }
}"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _probe_delta(row_id: str, hlc: int) -> dict[str, Any]:
    from lakesync_platform.core.delta import ColumnDelta, RowDelta
    from lakesync_platform.core.ids import delta_id
    from lakesync_platform.core.wire import delta_to_wire

    cols = (ColumnDelta("title", f"probe {row_id}"), ColumnDelta("completed", False))
    return delta_to_wire(
        RowDelta("INSERT", "todos", row_id, "probe", cols, hlc,
                 delta_id("probe", hlc, "todos", row_id, cols))
    )  # fmt: skip


def _arrived(db: Path, row_id: str) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return (
                conn.execute("SELECT 1 FROM todos WHERE row_id = ?", (row_id,)).fetchone()
                is not None
            )
    except sqlite3.OperationalError:  # no table yet, or a writer holds it
        return False


def _runs(dagster: str) -> list[dict[str, Any]]:
    response = httpx.post(
        f"{dagster}/graphql",
        json={"query": _RUNS, "variables": {"filter": {"pipelineName": "sync_demo"}}},
        timeout=30,
    )
    response.raise_for_status()
    return list(response.json()["data"]["runsOrError"]["results"])


_LOGS = """
query Logs($runId: ID!) {
  logsForRun(runId: $runId, limit: 5000) {
    ... on EventConnection { events { ... on MessageEvent { message } } }
  }
}"""
_PASS = re.compile(r"follow pass of '[^']+' in ([0-9.]+)s")


def _follow_passes(dagster: str, runs: list[dict[str, Any]], since: float) -> list[float]:
    """The seconds of every follow pass the runs since ``since`` logged."""
    seconds: list[float] = []
    for run in runs:
        if (run["creationTime"] or 0) < since:
            continue
        response = httpx.post(
            f"{dagster}/graphql",
            json={"query": _LOGS, "variables": {"runId": run["runId"]}},
            timeout=30,
        )
        events = response.json()["data"]["logsForRun"].get("events", [])
        for event in events:
            found = _PASS.search(event.get("message") or "")
            if found:
                seconds.append(float(found.group(1)))
    return seconds


def _run_figures(runs: list[dict[str, Any]], since: float) -> dict[str, Any]:
    begun = [r for r in runs if r["startTime"] and (r["creationTime"] or 0) >= since]
    done = [r for r in begun if r["status"] == "SUCCESS"]
    if not done:
        return {"runs": 0, "launch_s": [r["startTime"] - r["creationTime"] for r in begun]}
    launch = [r["startTime"] - r["creationTime"] for r in begun]
    total = [r["endTime"] - r["creationTime"] for r in done]
    steps: dict[str, list[float]] = {}
    for r in done:
        for s in r["stepStats"]:
            if s["startTime"] and s["endTime"]:
                key = s["stepKey"].split("__", 1)[-1] if "__" in s["stepKey"] else s["stepKey"]
                steps.setdefault(key, []).append(s["endTime"] - s["startTime"])
    return {
        "runs": len(done),
        "launch_s_median": statistics.median(launch),
        "launch_s_max": max(launch),
        "run_s_median": statistics.median(total),
        "run_s_max": max(total),
        "steps_s_median": {k: statistics.median(v) for k, v in sorted(steps.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=12)
    parser.add_argument("--gap", type=float, default=4.0, help="mean seconds between probes")
    parser.add_argument("--warmup", type=float, default=90.0, help="max seconds to first delivery")
    parser.add_argument("--timeout", type=float, default=60.0, help="max seconds per probe")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="lakesync-freshness-"))
    ports = {name: _free_port() for name in ("gateway", "dagster", "spark")}
    gateway = f"http://127.0.0.1:{ports['gateway']}"
    dagster = f"http://127.0.0.1:{ports['dagster']}"
    env = {**os.environ, "LAKESYNC_JAR_DIR": str(ROOT / "data" / "jars")}
    cmd = [
        str(Path(sys.executable).with_name("lakesync")), "dev", "--data-dir", str(data),
        "--gateway-port", str(ports["gateway"]), "--dagster-port", str(ports["dagster"]),
        "--spark-port", str(ports["spark"]),
    ]  # fmt: skip
    log(f"starting lakesync dev in {data}")
    started = time.time()
    with (data / "dev.out").open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    dest = data / "destination.db"
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and b"running" not in (data / "dev.out").read_bytes():
            if proc.poll() is not None:
                raise SystemExit((data / "dev.out").read_text()[-3000:])
            time.sleep(0.5)
        log(f"stack up in {time.time() - started:.1f}s; waiting for the first delivery")
        deadline = time.monotonic() + args.warmup
        while time.monotonic() < deadline and not (dest.exists() and _arrived_any(dest)):
            time.sleep(0.5)
        warm_at = time.time()
        log(f"first rows in the destination after {warm_at - started:.1f}s; probing")
        rnd = random.Random(7)
        with httpx.Client(timeout=10) as http:
            for i in range(args.probes):
                time.sleep(args.gap * (0.5 + rnd.random()))
                row_id = f"probe-{uuid.uuid4().hex[:8]}"
                hlc = encode(int(time.time() * 1000), 0)
                body = {"clientId": "probe", "deltas": [_probe_delta(row_id, hlc)],
                        "lastSeenHlc": "0"}  # fmt: skip
                http.post(f"{gateway}/v1/sync/demo/push", json=body).raise_for_status()
                acked = time.monotonic()
                until = acked + args.timeout
                while time.monotonic() < until and not _arrived(dest, row_id):
                    time.sleep(0.02)
                latency = time.monotonic() - acked
                latencies.append(latency)
                log(f"probe {i + 1}/{args.probes}: {latency:.2f}s")
        all_runs = _runs(dagster)
        runs = _run_figures(all_runs, started)
        passes = _follow_passes(dagster, all_runs, started)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    result = {
        "bench": "freshness",
        "git": git_info(),
        "probes": len(latencies),
        "latency_s": {
            "p50": pct(latencies, 50),
            "p90": pct(latencies, 90),
            "max": max(latencies),
            "all": latencies,
        },
        "runs": runs,
        "runs_launched": len([r for r in all_runs if (r["creationTime"] or 0) >= started]),
        "follow_passes": {
            "count": len(passes),
            "p50_s": pct(passes, 50) if passes else None,
            "max_s": max(passes) if passes else None,
        },
        "load_average": os.getloadavg(),
        "data_dir": str(data) if args.keep else None,
    }
    figures = [len(latencies), pct(latencies, 50), pct(latencies, 90), max(latencies)]
    print(table(["probes", "p50 s", "p90 s", "max s"], [figures]))
    if passes:
        print(table(["follow passes", "p50 s", "max s"],
                    [[len(passes), pct(passes, 50), max(passes)]]))  # fmt: skip
    if runs.get("runs"):
        print(table(["runs", "launch s (median)", "run s (median)", "run s (max)"],
                    [[runs["runs"], runs["launch_s_median"], runs["run_s_median"],
                      runs["run_s_max"]]]))  # fmt: skip
        print(table(["step", "median s"], [[k, v] for k, v in runs["steps_s_median"].items()]))
    path = write_json(RESULTS / "freshness.json", result)
    log(f"wrote {path}")
    if not args.keep:
        import shutil

        shutil.rmtree(data, ignore_errors=True)


def _arrived_any(db: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM todos").fetchone()[0] > 0
    except sqlite3.OperationalError:
        return False


if __name__ == "__main__":
    main()
