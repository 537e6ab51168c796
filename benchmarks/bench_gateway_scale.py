"""Gateway benchmark, sections 2 and 3: pull latency and push throughput with 10k and with 1M
deltas already in the WAL, and the slowdown between the two.

Per state: pull latency p50/p99 of 1 000-delta pages (``limit=1000``; TS format and
``format=stamped``) at random cursors from one sequential client (section 2), then push
throughput of 4 clients x 500 (section 3), against a real ``lakesync gateway`` subprocess.

How the WAL is filled (also printed and stored in the JSON): in-process, through
``SyncService(WriteAheadLog.open(url), clock).push`` with batches of 2 000 real deltas (content
ids from ``delta_id``), i.e. exactly the server's write path without HTTP, on both backends (the
same deltas; Postgres is ANALYZEd every 100k deltas, as autovacuum would).  ``--pg-fill copy``
instead bulk-copies the SQLite WAL into Postgres with COPY (faster, but the indexes are then
built from sorted keys, denser than after organic growth, so 1M numbers are optimistic).

Shared hosts: each state keeps the best of ``--repeat`` rounds (full: 2) and ``--wait-quiet S``
waits up to S seconds before each measurement for the host to calm down.

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_gateway_scale.py --quick   # 10k -> 50k
    .venv/bin/python benchmarks/bench_gateway_scale.py           # 10k -> 1M
Results: a table on stdout and JSON in benchmarks/results/gateway_scale.json (``--out``).
``benchmarks/bench_gateway.py`` runs these sections with the others.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import snapshot

snapshot.activate(__name__ == "__main__" and "--no-snapshot" not in sys.argv)

from benchmarks.harness.backends import Backend  # noqa: E402
from benchmarks.harness.corpus import fill_chunks, generate  # noqa: E402
from benchmarks.harness.cpu import wait_for_quiet  # noqa: E402
from benchmarks.harness.fill import copy_sqlite_to_pg, fill_service, wal_cursor  # noqa: E402
from benchmarks.harness.gateway_run import Plan, Run, Scenario, parser, run  # noqa: E402
from benchmarks.harness.load import gateway, max_cursor, run_pulls, run_push, warm_up  # noqa: E402
from benchmarks.harness.output import fmt_count, log, table  # noqa: E402
from lakesync_platform.core.delta import RowDelta  # noqa: E402

TARGET_PULL_P50_MS = 10.0
TARGET_SLOWDOWN_PCT = 20.0
_FILL_CHUNK = 10_000


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """Section 3's flags."""
    ap.add_argument(
        "--pg-fill",
        choices=["copy", "service"],
        default="service",
        help="how the 1M Postgres WAL is filled (see module doc)",
    )
    ap.add_argument("--scale-max", type=int, default=0, help="override the big WAL size")
    ap.add_argument(
        "--repeat", type=int, default=0, help="rounds per scale state, best kept (full: 2)"
    )


def configure(plan: Plan, args: argparse.Namespace) -> None:
    """Apply section 3's flags; make corpus slots 0-3 long enough for its pushes."""
    if args.scale_max:
        plan.scale_big = args.scale_max
    if args.repeat:
        plan.repeat = args.repeat
    need = 2 * plan.repeat * plan.scale_push_per_client
    for i in range(4):  # slots 0-3 feed the scale pushes: one fresh slice per state x round
        plan.slot_sizes[i] = max(plan.slot_sizes[i], need)


def measure_state(
    ctx: Run, backend: Backend, url: str, slice_no: int, label: str, analyze: bool
) -> dict[str, Any]:
    """Pull latency (both formats) then push throughput (4 x 500) on the WAL at ``url``.

    ``plan.repeat`` rounds; the reported figures are the best round (noise from other
    processes on a shared host only ever slows a round down); every round is kept."""
    plan, corpus = ctx.plan, ctx.corpus
    if analyze:
        backend.analyze(url)
    server = gateway(url, 1, ctx.workdir)
    rounds: list[dict[str, Any]] = []
    try:
        server.start()
        size = max_cursor(server)
        # warm the push path once (distinct warm deltas per state)
        warm_up(server, corpus.warm[2000 * (slice_no + 1) : 2000 * (slice_no + 2)])
        per = plan.scale_push_per_client
        for r in range(plan.repeat):
            quiet = wait_for_quiet(plan.wait_quiet)
            pulls = [
                run_pulls(server, plan.pull_samples, stamped, size, seed=100 * slice_no + r)
                for stamped in (False, True)
            ]
            for p in pulls:
                p["background_cores_before"] = quiet
            lo = (slice_no * plan.repeat + r) * per
            quiet_push = wait_for_quiet(plan.wait_quiet)
            push = run_push(server, corpus, 4, 500, plan.scale_limit_s, ranges=[(lo, lo + per)] * 4)
            push["background_cores_before"] = quiet_push
            rounds.append({"pull": pulls, "push": push})
        after = max_cursor(server)
    finally:
        server.stop()
    best_push = max((rd["push"] for rd in rounds), key=lambda p: p["deltas_per_s"])
    best_pulls = [
        min((rd["pull"][i] for rd in rounds), key=lambda p: p["p50_ms"]) for i in range(2)
    ]
    log(
        f"scale {backend.name:8s} {label:>5s} (WAL {size:,}): push "
        f"{best_push['deltas_per_s']:,.0f}/s  pull ts p50 {best_pulls[0]['p50_ms']} ms, "
        f"stamped p50 {best_pulls[1]['p50_ms']} ms  (best of {len(rounds)})"
    )
    return {
        "backend": backend.name,
        "state": label,
        "wal_deltas_before": size,
        "wal_deltas_after": after,
        "pull": best_pulls,
        "push": best_push,
        "rounds": rounds,
    }


class _Fills:
    """The fill deltas: the small fill (generated once), and the big fill's chunks beyond it
    (generated on demand; kept in memory for a second backend when both fill through the
    service, so both WALs get the same deltas)."""

    def __init__(self, plan: Plan, procs: int, keep_big: bool) -> None:
        self.plan, self.procs, self.keep_big = plan, procs, keep_big
        self._first: list[RowDelta] | None = None
        self.big_cache: list[list[RowDelta]] = []

    def first(self) -> list[RowDelta]:
        if self._first is None:
            chunks = fill_chunks(self.plan.scale_small, self.procs, _FILL_CHUNK)
            self._first = [d for c in chunks for d in c]
        return self._first

    def big(
        self, total: int, on_chunk: Callable[[int], None] | None = None
    ) -> Iterator[list[RowDelta]]:
        """``total`` fill deltas beyond the small fill, in chunks (cached, then generated)."""
        done = 0
        if total <= 0:
            return
        for i, chunk in enumerate(self._big_source()):
            part = chunk[: total - done]
            done += len(part)
            if on_chunk is not None:
                on_chunk(i)
            yield part
            if done >= total:
                return

    def _big_source(self) -> Iterator[list[RowDelta]]:
        yield from list(self.big_cache)
        n_tasks = (self.plan.scale_big + _FILL_CHUNK - 1) // _FILL_CHUNK
        tasks = [
            (f"bench-filler-big-{k}", _FILL_CHUNK, 90_000 + k, True)
            for k in range(len(self.big_cache), n_tasks)
        ]
        for deltas in generate(tasks, self.procs):
            if self.keep_big:
                self.big_cache.append(deltas)
            yield deltas


def measure(ctx: Run) -> dict[str, Any]:
    """Both states on each backend: Postgres small, SQLite small then grown to big, Postgres
    big."""
    plan, args = ctx.plan, ctx.args
    analyze = not args.no_analyze
    small_label = fmt_count(plan.scale_small)
    big_label = fmt_count(plan.scale_big)
    states: list[dict[str, Any]] = []
    fills: dict[str, Any] = {}
    pg = ctx.backends.get("postgres") if "postgres" in plan.backends else None
    sq = ctx.backends.get("sqlite") if "sqlite" in plan.backends else None
    deltas = _Fills(
        plan, args.procs, pg is not None and sq is not None and args.pg_fill == "service"
    )
    pg_big_url = None
    try:
        if pg is not None:
            url = pg.fresh("scale_small")
            try:
                fills["postgres_small"] = {
                    "method": "in-process SyncService.push",
                    **fill_service(url, iter([deltas.first()])),
                }
                states.append(measure_state(ctx, pg, url, 0, small_label, analyze))
            finally:
                pg.drop(url)
        if sq is not None:
            url = sq.fresh("scale")
            try:
                fills["sqlite_small"] = {
                    "method": "in-process SyncService.push",
                    **fill_service(url, iter([deltas.first()])),
                }
                states.append(measure_state(ctx, sq, url, 0, small_label, False))
                have = wal_cursor(url)
                need = max(0, plan.scale_big - have)
                log(f"filling SQLite WAL in-process: {have:,} -> {plan.scale_big:,} deltas ...")
                fills["sqlite_big"] = {
                    "method": "in-process SyncService.push (batches of 2000)",
                    **fill_service(url, deltas.big(need)),
                }
                log(f"  filled: {fills['sqlite_big']}")
                if pg is not None and args.pg_fill == "copy":
                    pg_big_url = pg.fresh("scale_big")
                    log("copying the SQLite WAL into Postgres (COPY) ...")
                    fills["postgres_big"] = {
                        "method": "COPY of the SQLite WAL tables written by SyncService, "
                        "then ANALYZE",
                        **copy_sqlite_to_pg(url, pg_big_url),
                    }
                    log(f"  copied: {fills['postgres_big']['rows']}")
                states.append(measure_state(ctx, sq, url, 1, big_label, False))
            finally:
                sq.drop(url)
        if pg is not None:
            if pg_big_url is None:
                pg_big_url = pg.fresh("scale_big")
                big_url = pg_big_url
                log(f"filling Postgres WAL in-process: 0 -> {plan.scale_big:,} deltas ...")

                def analyze_now(i: int) -> None:
                    if i % 10 == 9 and analyze:
                        pg.analyze(big_url)  # what autovacuum does while a table grows

                def pg_chunks() -> Iterator[list[RowDelta]]:
                    yield deltas.first()
                    yield from deltas.big(plan.scale_big - plan.scale_small, analyze_now)

                fills["postgres_big"] = {
                    "method": "in-process SyncService.push (batches of 2000), ANALYZE every "
                    "100k deltas",
                    **fill_service(pg_big_url, pg_chunks()),
                }
                deltas.big_cache.clear()
                log(f"  filled: {fills['postgres_big']}")
            try:
                states.append(measure_state(ctx, pg, pg_big_url, 1, big_label, analyze))
            finally:
                pg.drop(pg_big_url)
    finally:
        if pg is not None and pg_big_url is not None:
            with contextlib.suppress(Exception):
                pg.drop(pg_big_url)
    return {
        "small": plan.scale_small,
        "big": plan.scale_big,
        "repeat": plan.repeat,
        "fills": fills,
        "states": states,
    }


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Pull p50 per state, and the push and pull slowdowns from the small to the big state."""
    out = []
    scale = result.get("scale", {}).get("states", [])
    for st in scale:
        for p in st["pull"]:
            out.append(
                {
                    "target": f"pull {st['backend']} {p['format']} @{st['state']} "
                    f"p50 <= {TARGET_PULL_P50_MS:g} ms",
                    "value": p["p50_ms"],
                    "met": p["p50_ms"] <= TARGET_PULL_P50_MS,
                }
            )
    for bname in ("sqlite", "postgres"):
        mine = [s for s in scale if s["backend"] == bname]
        if len(mine) != 2:
            continue
        small, big = mine
        drop = 100 * (1 - big["push"]["deltas_per_s"] / small["push"]["deltas_per_s"])
        out.append(
            {
                "target": f"push slowdown {bname} {small['state']}->{big['state']} "
                f"<= {TARGET_SLOWDOWN_PCT:g}%",
                "value": round(drop, 1),
                "met": drop <= TARGET_SLOWDOWN_PCT,
            }
        )
        for ps, pb in zip(small["pull"], big["pull"], strict=True):
            up = 100 * (pb["p50_ms"] / ps["p50_ms"] - 1)
            out.append(
                {
                    "target": f"pull {ps['format']} p50 slowdown {bname} "
                    f"{small['state']}->{big['state']} <= {TARGET_SLOWDOWN_PCT:g}%",
                    "value": round(up, 1),
                    "met": up <= TARGET_SLOWDOWN_PCT,
                }
            )
    return out


_PULL_COLUMNS = [
    "backend",
    "WAL",
    "format",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "mean ms",
    "KiB/page",
    "srv cpu ms/page",
    "srv cpu",
    "client cpu",
    "pg cpu",
    "other cpu",
    "steal",
]
_SCALE_COLUMNS = [
    "backend",
    "state",
    "WAL before",
    "deltas/s",
    "p50 ms",
    "p99 ms",
    "srv cpu",
    "srv us/delta",
    "gen cpu",
    "pg cpu",
    "other cpu",
    "steal",
]
_PUSH_KEYS = [
    "deltas_per_s",
    "push_p50_ms",
    "push_p99_ms",
    "server_cpu_cores",
    "server_cpu_us_per_delta",
    "generator_cpu_cores",
    "postgres_cpu_cores",
    "other_cpu_cores",
    "steal_cores",
]


def report(result: dict[str, Any]) -> list[str]:
    """Section 2's and section 3's tables and the fills."""
    scale = result.get("scale")
    if not scale or not scale.get("states"):
        return []
    pulls = [
        [
            s["backend"],
            s["wal_deltas_before"],
            p["format"],
            p["p50_ms"],
            p["p90_ms"],
            p["p99_ms"],
            p["mean_ms"],
            p["page_bytes"] / 1024,
            p["server_cpu_ms_per_page"],
            p["server_cpu_cores"],
            p["generator_cpu_cores"],
            p["postgres_cpu_cores"],
            p["other_cpu_cores"],
            p["steal_cores"],
        ]
        for s in scale["states"]
        for p in s["pull"]
    ]
    pushes = [
        [s["backend"], s["state"], s["wal_deltas_before"], *(s["push"][k] for k in _PUSH_KEYS)]
        for s in scale["states"]
    ]
    parts = [
        "\n== 2. Pull latency, 1 000-delta pages at random cursors (sequential client, workers=1)",
        table(_PULL_COLUMNS, pulls),
        f"\n== 3. Scale {fmt_count(scale['small'])} -> {fmt_count(scale['big'])} deltas in the "
        f"WAL (push 4 clients x 500; sections 2 and 3: best of {scale.get('repeat', 1)} "
        "round(s))",
        table(_SCALE_COLUMNS, pushes),
    ]
    for name, f in scale["fills"].items():
        extra = {k: v for k, v in f.items() if k not in ("method",)}
        parts.append(f"   fill {name}: {f['method']}  {extra}")
    return parts


SCALE = Scenario(
    "scale",
    measure,
    report,
    add_arguments=add_arguments,
    configure=configure,
    targets=targets,
)


def main(argv: list[str] | None = None) -> int:
    """Run sections 2 and 3 alone."""
    ap = parser(__doc__, [SCALE], "gateway_scale.json", quick_help="small run (10k -> 50k)")
    return run(ap.parse_args(argv), [SCALE])


if __name__ == "__main__":
    sys.exit(main())
