"""Actions: throughput and latency of dispatch with durable idempotency, fresh and duplicate.

Two measurements, each with a handler that does nothing, so the figures are what the action
path itself costs (claim the keys in the WAL, run the handler on a worker thread, store the
result — or, for a duplicate, read the stored result):

* **service** — ``ActionService.dispatch`` in this process over a fresh SQLite WAL and, when
  the local PostgreSQL answers, a fresh PostgreSQL WAL: ``--actions`` fresh actions one at a
  time (actions/s, p50 and p99 latency), the same actions again (duplicates), and the fresh
  ones again from ``--threads`` threads at once;
* **http** — a real ``lakesync gateway`` process (SQLite WAL) with a declared ``sql`` connector
  whose statement is ``SELECT 1`` on an SQLite file: one action per ``POST /v1/sync/{gw}/action``
  (fresh, then duplicate), and batches of 100 actions per request.

It prints a table and writes ``benchmarks/results/actions.json`` (``--out``).

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_actions.py                  # ~1 min
    .venv/bin/python benchmarks/bench_actions.py --actions 500 --no-http
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import httpx

from benchmarks.harness.backends import Backend, PostgresBackend, SqliteBackend
from benchmarks.harness.output import RESULTS, log, table, write_json
from benchmarks.harness.snapshot import git_info
from benchmarks.harness.stats import pct
from lakesync_platform.core.actions import Action, ActionContext, ActionDescriptor
from lakesync_platform.core.ids import action_id
from lakesync_platform.sync.actions import ActionRegistry, ActionService
from lakesync_platform.testing import GatewayProcess, dev_token
from lakesync_platform.wal.store import WriteAheadLog

GW = "bench"
CLIENT = "bench-client"
SECRET = "bench-secret"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


class NoOp:
    """A connector whose one action type does nothing."""

    @property
    def descriptors(self) -> Sequence[ActionDescriptor]:
        return (ActionDescriptor("noop", "Does nothing"),)

    def execute(self, action: Action, context: ActionContext) -> Mapping[str, Any]:
        return {}


def make_actions(n: int, connector: str, action_type: str, salt: int) -> list[Action]:
    """``n`` distinct actions of ``CLIENT``."""
    out = []
    for i in range(n):
        params = {"i": i, "salt": salt}
        aid = action_id(CLIENT, i + 1, connector, action_type, params)
        out.append(Action(aid, CLIENT, i + 1, connector, action_type, params))
    return out


def timed(calls: Sequence[Callable[[], object]], threads: int = 1) -> dict[str, float]:
    """Run ``calls`` (on ``threads`` threads); actions/s and latency percentiles in ms."""
    latencies: list[float] = []

    def one(call: Callable[[], object]) -> None:
        start = time.perf_counter()
        call()
        latencies.append((time.perf_counter() - start) * 1000)

    started = time.perf_counter()
    if threads == 1:
        for call in calls:
            one(call)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, calls))
    wall = time.perf_counter() - started
    return {
        "per_s": len(calls) / wall,
        "p50_ms": pct(latencies, 50),
        "p99_ms": pct(latencies, 99),
    }


def bench_service(backend: Backend, n: int, threads: int) -> dict[str, dict[str, float]]:
    """Fresh, duplicate and concurrent fresh dispatches over one fresh WAL of ``backend``."""
    url = backend.fresh("actions")
    wal = WriteAheadLog.open(url)
    registry = ActionRegistry()
    registry.register(GW, "noop", NoOp())
    service = ActionService(wal, registry, lambda: time.time_ns() // 1_000_000)
    try:
        actions = make_actions(n, "noop", "noop", 0)
        calls = [lambda a=a: service.dispatch(GW, CLIENT, [a]) for a in actions]
        fresh = timed(calls)
        duplicate = timed(calls)
        concurrent = [
            lambda a=a: service.dispatch(GW, CLIENT, [a])
            for a in make_actions(n, "noop", "noop", 1)
        ]
        parallel = timed(concurrent, threads)
    finally:
        service.close()
        wal.close()
        backend.drop(url)
    return {"fresh": fresh, "duplicate": duplicate, f"fresh x{threads} threads": parallel}


DEFS = """
gateway: bench
actions:
  - connector: noop
    kind: sql
    url: "sqlite:///${LAKESYNC_DATA_DIR}/noop.db"
    types:
      noop:
        description: Does nothing
        statement: SELECT 1 AS ok
        params: {i: {type: integer}, salt: {type: integer}}
"""


def bench_http(workdir: Path, n: int) -> dict[str, dict[str, float]]:
    """One action per request (fresh, duplicate) and batches of 100, through a gateway."""
    data = workdir / "gateway"
    (data / "defs").mkdir(parents=True)
    (data / "defs" / "bench.yaml").write_text(DEFS)
    headers = {"Authorization": f"Bearer {dev_token(CLIENT, GW, SECRET)}"}
    with (
        GatewayProcess(data, SECRET, extra_args=["--defs", str(data / "defs")]).start() as gw,
        httpx.Client(base_url=gw.url, headers=headers, timeout=60) as http,
    ):

        def send(batch: Sequence[Action]) -> None:
            body = {"clientId": CLIENT, "actions": [a.to_json() for a in batch]}
            resp = http.post(f"/v1/sync/{GW}/action", json=body)
            resp.raise_for_status()
            assert all("data" in r for r in resp.json()["results"]), resp.text

        actions = make_actions(n, "noop", "noop", 2)
        calls = [lambda a=a: send([a]) for a in actions]
        fresh = timed(calls)
        duplicate = timed(calls)
        batches = make_actions(n * 4, "noop", "noop", 3)
        chunks = [batches[i : i + 100] for i in range(0, len(batches), 100)]
        batched = timed([lambda c=c: send(c) for c in chunks])
        batched["per_s"] *= 100
        batched["p50_ms"] /= 100
        batched["p99_ms"] /= 100
    return {"fresh": fresh, "duplicate": duplicate, "fresh, 100 per request": batched}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actions", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--out", default=str(RESULTS / "actions.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {"git": git_info(), "actions": args.actions, "runs": {}}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        backends: list[Backend] = [SqliteBackend(Path(tmp))]
        try:
            backends.append(PostgresBackend(PG_ADMIN))
        except Exception as exc:
            log(f"PostgreSQL not reachable, skipped: {exc}")
        for backend in backends:
            log(f"service over {backend.name}: {args.actions} actions")
            run = bench_service(backend, args.actions, args.threads)
            results["runs"][f"service/{backend.name}"] = run
            rows += [
                [f"service/{backend.name}", k, v["per_s"], v["p50_ms"], v["p99_ms"]]
                for k, v in run.items()
            ]
        if not args.no_http:
            log(f"http over sqlite: {args.actions} actions")
            run = bench_http(Path(tmp), args.actions)
            results["runs"]["http/sqlite"] = run
            rows += [
                ["http/sqlite", k, v["per_s"], v["p50_ms"], v["p99_ms"]] for k, v in run.items()
            ]
    print(table(["path", "actions", "actions/s", "p50 ms", "p99 ms"], rows))
    out = write_json(args.out, results)
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
