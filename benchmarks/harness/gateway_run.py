"""One gateway benchmark run: flags, plan, set-up, the scenarios, results JSON and report.

A scenario (push, scale, profile) is a :class:`Scenario`: its own flags, what it changes in the
:class:`Plan`, a function that measures and returns its part of the results, and its part of
the report and of the targets. :func:`run` gives every selected scenario the same
:class:`Run` (WAL backends, the pre-built delta corpus, a work directory), stores the results
under ``meta`` / the scenario's name / ``targets``, and prints the report.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends import Backend, PostgresBackend, SqliteBackend
from .corpus import Corpus, build_corpus
from .cpu import background_cores
from .output import RESULTS, log, table, write_json
from .snapshot import ROOT, code_hash, git_info, remove_snapshot


@dataclass
class Plan:
    """Sizes and repetitions of a run (stored in the results' ``meta``)."""

    quick: bool
    backends: list[str]
    workers: list[int]
    clients: list[int]
    batches: list[int]
    push_seconds: float
    slot_sizes: list[int]
    warm: int
    pull_samples: int
    scale_small: int
    scale_big: int
    scale_push_per_client: int
    scale_limit_s: float
    repeat: int = 1
    wait_quiet: float = 0.0


@dataclass
class Run:
    """What a scenario measures with: the plan, the flags, the WAL backends by name, the delta
    corpus and a work directory (SQLite WALs, gateway data and logs)."""

    plan: Plan
    args: argparse.Namespace
    backends: dict[str, Backend]
    corpus: Corpus
    workdir: Path


def _no_arguments(ap: argparse.ArgumentParser) -> None:
    pass


def _no_configuration(plan: Plan, args: argparse.Namespace) -> None:
    pass


def _no_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    return []


@dataclass(frozen=True)
class Scenario:
    """One part of the gateway benchmark; ``name`` is its key in the results and in
    ``--sections``. ``measure`` returns its results; ``report`` its report lines (none if the
    results lack it), ``after_targets`` puts them after the targets table (diagnostics);
    ``add_arguments`` adds its flags, ``configure`` applies them to the plan; ``targets``
    evaluates its part of the results."""

    name: str
    measure: Callable[[Run], Any]
    report: Callable[[dict[str, Any]], list[str]]
    add_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    configure: Callable[[Plan, argparse.Namespace], None] = _no_configuration
    targets: Callable[[dict[str, Any]], list[dict[str, Any]]] = _no_targets
    after_targets: bool = False


def parser(
    doc: str, scenarios: Sequence[Scenario], out_name: str, *, quick_help: str
) -> argparse.ArgumentParser:
    """The flags every gateway benchmark takes, then each scenario's own."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="admin URL; benchmark databases are created next to it and dropped",
    )
    ap.add_argument(
        "--no-analyze",
        action="store_true",
        help="do not ANALYZE Postgres after warm-up/fill (shows cold-stats plans)",
    )
    for s in scenarios:
        s.add_arguments(ap)
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        help="before each measurement wait up to this many seconds for other processes on "
        "the host to use < 0.5 cores (shared machines); the level seen is recorded",
    )
    ap.add_argument(
        "--procs", type=int, default=os.cpu_count() or 2, help="processes generating deltas"
    )
    ap.add_argument("--workdir", default=None, help="where SQLite WALs and logs go (tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="run the live source tree (default: a copy taken at start, so edits made to the "
        "repository during the run do not mix code versions)",
    )
    ap.add_argument("--out", default=str(RESULTS / out_name))
    return ap


def make_plan(args: argparse.Namespace, scenarios: Sequence[Scenario]) -> Plan:
    """The quick or full plan, with the flags' overrides (each scenario applies its own)."""
    if args.quick:
        plan = Plan(
            quick=True,
            backends=[],
            workers=[1],
            clients=[1, 4, 16],
            batches=[100, 500],
            push_seconds=1.2,
            slot_sizes=[12_000] + [10_000] * 3 + [3_000] * 12,
            warm=6_000,
            pull_samples=40,
            scale_small=10_000,
            scale_big=50_000,
            scale_push_per_client=2_500,
            scale_limit_s=10.0,
            repeat=1,
        )
    else:
        plan = Plan(
            quick=False,
            backends=[],
            workers=[1, 2],
            clients=[1, 4, 16],
            batches=[100, 500],
            push_seconds=4.0,
            slot_sizes=[50_000] + [40_000] * 3 + [10_000] * 12,
            warm=6_000,
            pull_samples=200,
            scale_small=10_000,
            scale_big=1_000_000,
            scale_push_per_client=10_000,
            scale_limit_s=12.0,
            repeat=2,
        )
    plan.backends = args.backends.split(",")
    for s in scenarios:
        s.configure(plan, args)
    plan.wait_quiet = args.wait_quiet
    return plan


_NOTES = [
    "Every section-1 row runs on a fresh WAL (new SQLite file / Postgres database).",
    "Deltas are new rows (INSERT, 4 columns), content ids from core.ids.delta_id, "
    "HLCs from core.hlc.HLC over the wall clock at corpus generation time.",
    "Postgres is ANALYZEd after the warm-up pushes unless --no-analyze.",
    "Push latency is per request (batch), client side; CPU columns are average "
    "cores used by the server process tree / load generators / all postgres "
    "processes during the timed window.",
]


def run(
    args: argparse.Namespace, scenarios: Sequence[Scenario], selected: set[str] | None = None
) -> int:
    """Set up, measure the ``selected`` scenarios (default: all) in their order, write the
    results JSON to ``args.out`` and print the report."""
    plan = make_plan(args, scenarios)
    chosen = [s for s in scenarios if selected is None or s.name in selected]
    RESULTS.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="lakesync-bench-", dir=args.workdir))
    started = time.time()
    backends: dict[str, Backend] = {}
    pgb: PostgresBackend | None = None
    if "sqlite" in plan.backends:
        backends["sqlite"] = SqliteBackend(workdir)
    if "postgres" in plan.backends:
        pgb = PostgresBackend(args.pg_url)
        pgb.drop_leftovers()
        backends["postgres"] = pgb
    result: dict[str, Any] = {
        "meta": {
            "mode": "quick" if plan.quick else "full",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "argv": sys.argv[1:],
            "git": git_info(),
            "background_cores_at_start": round(background_cores(2.0), 2),
            "plan": plan.__dict__,
            "notes": _NOTES,
        }
    }
    try:
        log(
            f"workdir {workdir}; mode {'quick' if plan.quick else 'full'}; "
            f"generating corpus ({sum(plan.slot_sizes) + plan.warm:,} deltas) ..."
        )
        corpus = build_corpus(plan.slot_sizes, plan.warm, args.procs)
        log("corpus ready")
        ctx = Run(plan, args, backends, corpus, workdir)
        for s in chosen:
            result[s.name] = s.measure(ctx)
        result["targets"] = [t for s in scenarios for t in s.targets(result)]
    finally:
        result["meta"]["duration_s"] = round(time.time() - started, 1)
        live = code_hash(ROOT)
        result["meta"]["git"]["live_code_changed_during_run"] = (
            live != result["meta"]["git"]["code_hash"]
        )
        remove_snapshot()
        out = write_json(args.out, result)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        if pgb is not None:
            with contextlib.suppress(Exception):
                pgb.drop_leftovers()
    print(report(result, scenarios))
    print(f"\nJSON: {out}   ({result['meta']['duration_s']} s)")
    return 0


def report(result: dict[str, Any], scenarios: Sequence[Scenario]) -> str:
    """The run's header, each scenario's tables, and the targets."""
    meta = result.get("meta", {})
    git = meta.get("git", {})
    parts = [
        f"LakeSync gateway benchmark ({meta.get('mode')}), commit {git.get('commit', '')[:10]} "
        f"{'+ uncommitted changes ' if git.get('product_code_dirty') else ''}"
        f"(code {git.get('code_hash')}{', snapshot' if git.get('code_snapshot') else ''})"
        f" — {meta.get('cpus')} CPUs, other processes used "
        f"{meta.get('background_cores_at_start')} cores at start\n"
    ]
    for s in scenarios:
        if not s.after_targets:
            parts += s.report(result)
    targets = result.get("targets", [])
    if targets:
        parts.append("\n== Targets")
        parts.append(
            table(
                ["target", "value", "status"],
                [[t["target"], t["value"], "met" if t["met"] else "MISSED"] for t in targets],
            )
        )
    for s in scenarios:
        if s.after_targets:
            parts += s.report(result)
    return "\n".join(parts)
