"""Gateway benchmark, section 1: durable push throughput over HTTP.

Durable push throughput (deltas/s) against a real ``lakesync gateway`` (uvicorn) subprocess on
127.0.0.1, SQLite and Postgres WAL, 1/4/16 concurrent clients, batches of 100 and 500 new-row
deltas (4 columns), ``--workers`` 1 and 2. Every configuration gets a fresh WAL (new SQLite
file / new Postgres database). Load generation: one forked process per client (http.client,
keep-alive), request bodies pre-built before the timed window; generator, server and Postgres
CPU are all reported, as is the CPU other processes used ("other cpu"). The code under test is
a copy taken at start (``--no-snapshot``: the live tree).

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_gateway_push.py --quick
    .venv/bin/python benchmarks/bench_gateway_push.py --backends sqlite --clients 4 --batches 500
Results: a table on stdout and JSON in benchmarks/results/gateway_push.json (``--out``).
``benchmarks/bench_gateway.py`` runs this section with the others.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import snapshot

snapshot.activate(__name__ == "__main__" and "--no-snapshot" not in sys.argv)

from benchmarks.harness.cpu import wait_for_quiet  # noqa: E402
from benchmarks.harness.gateway_run import Plan, Run, Scenario, parser, run  # noqa: E402
from benchmarks.harness.load import gateway, register_schema, run_push, warm_up  # noqa: E402
from benchmarks.harness.output import log, table  # noqa: E402

TARGETS = {"sqlite": 20_000, "postgres": 10_000}
"""Deltas/s a push of 4 clients x 500 should reach, per backend."""


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """Section 1's flags."""
    ap.add_argument(
        "--workers", default="", help="server --workers values for section 1 (full: 1,2; quick: 1)"
    )
    ap.add_argument("--clients", default="", help="section 1 client counts (default 1,4,16)")
    ap.add_argument("--batches", default="", help="section 1 batch sizes (default 100,500)")
    ap.add_argument("--push-seconds", type=float, default=0.0)


def configure(plan: Plan, args: argparse.Namespace) -> None:
    """Apply section 1's flags to the plan."""
    if args.workers:
        plan.workers = [int(w) for w in args.workers.split(",")]
    if args.clients:
        plan.clients = [int(c) for c in args.clients.split(",")]
    if args.batches:
        plan.batches = [int(b) for b in args.batches.split(",")]
    if args.push_seconds:
        plan.push_seconds = args.push_seconds


def measure(ctx: Run) -> list[dict[str, Any]]:
    """One row per backend x workers x batch x clients, each on a fresh WAL."""
    plan, corpus = ctx.plan, ctx.corpus
    rows = []
    for bname in plan.backends:
        backend = ctx.backends[bname]
        for workers in plan.workers:
            for batch in plan.batches:
                for clients in plan.clients:
                    url = backend.fresh(f"push{clients}x{batch}w{workers}")
                    server = gateway(url, workers, ctx.workdir)
                    try:
                        server.start()
                        register_schema(server)
                        warm_up(server, corpus.warm[:2000])
                        if not ctx.args.no_analyze:
                            backend.analyze(url)
                        quiet = wait_for_quiet(plan.wait_quiet)
                        res = run_push(server, corpus, clients, batch, plan.push_seconds)
                        res["background_cores_before"] = quiet
                    finally:
                        server.stop()
                        backend.drop(url)
                    res = {"backend": bname, "workers": workers, **res}
                    rows.append(res)
                    log(
                        f"push {bname:8s} w={workers} c={clients:2d} b={batch}: "
                        f"{res['deltas_per_s']:>9,.0f} deltas/s  p50 {res['push_p50_ms']} ms  "
                        f"srv {res['server_cpu_cores']} gen {res['generator_cpu_cores']} "
                        f"pg {res['postgres_cpu_cores']} other {res['other_cpu_cores']} cores"
                        + (f"  ERRORS {res['errors'][:1]}" if res["errors"] else "")
                    )
    return rows


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """4 clients x 500 against :data:`TARGETS`."""
    out = []
    push = result.get("push", [])
    for bname, target in TARGETS.items():
        for r in push:
            if r["backend"] == bname and r["clients"] == 4 and r["batch"] == 500:
                out.append(
                    {
                        "target": f"push {bname} 4x500 w{r['workers']} >= {target:,}/s",
                        "value": r["deltas_per_s"],
                        "met": r["deltas_per_s"] >= target,
                    }
                )
    return out


_COLUMNS = [
    "backend",
    "workers",
    "clients",
    "batch",
    "deltas/s",
    "req/s",
    "p50 ms",
    "p99 ms",
    "srv cpu",
    "srv us/delta",
    "gen cpu",
    "pg cpu",
    "other cpu",
    "steal",
    "deltas",
    "errors",
]


def report(result: dict[str, Any]) -> list[str]:
    """Section 1's table."""
    push = result.get("push", [])
    if not push:
        return []
    rows = [
        [
            r["backend"],
            r["workers"],
            r["clients"],
            r["batch"],
            r["deltas_per_s"],
            r["requests"] / r["elapsed_s"] if r["elapsed_s"] else 0.0,
            r["push_p50_ms"],
            r["push_p99_ms"],
            r["server_cpu_cores"],
            r["server_cpu_us_per_delta"],
            r["generator_cpu_cores"],
            r["postgres_cpu_cores"],
            r["other_cpu_cores"],
            r["steal_cores"],
            r["deltas"],
            len(r["errors"]),
        ]
        for r in push
    ]
    return [
        "== 1. Durable push throughput (fresh WAL per row, new rows, 4 columns)",
        table(_COLUMNS, rows),
        f"   (cpu columns: average cores used during the timed window by the server "
        f"tree / load generators / postgres / every other process on the host; steal: "
        f"CPU the hypervisor gave to other VMs; the machine has {os.cpu_count()})",
    ]


PUSH = Scenario(
    "push",
    measure,
    report,
    add_arguments=add_arguments,
    configure=configure,
    targets=targets,
)


def main(argv: list[str] | None = None) -> int:
    """Run section 1 alone."""
    ap = parser(__doc__, [PUSH], "gateway_push.json", quick_help="small run (~30 s)")
    return run(ap.parse_args(argv), [PUSH])


if __name__ == "__main__":
    sys.exit(main())
