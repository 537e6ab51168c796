"""Following a gateway: a sync run that keeps syncing while changes keep coming.

A Dagster run costs seconds before its first step — the daemon's sensor loop (every 5 s at
best), the run queue, a new process that imports the code location — so a change that lands
while a sync run is busy waits for that run, then for the next one's launch. With ``follow``
(``LAKESYNC_FOLLOW_SECONDS`` > 0), a sync run that has done its steps goes on: it looks at the
WAL every ``poll_s`` (0.2 s) and, when changes wait, syncs them in one more **pass** — flush,
state, compaction when due, materialise, then the checks of what the pass wrote
(:func:`sync_pass`, the same library calls as the job's steps) — until ``follow_s`` pass with
nothing new, or ``max_s`` in all. Under a steady load a change then reaches the destinations
within a pass (about 2 s here), not a run launch and a run (docs/pipeline.md, *Freshness*).

A failing check fails the run, as the job's own checks do; each pass takes the lake's lock per
stage, so other jobs (upkeep, checkpoints, ``lakesync run``) interleave with a following run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.errors import FlushError
from ..spark.flush import FlushResult
from ..spark.state import StateResult
from ..spark.upkeep import CompactionResult
from .compaction import compact_due
from .context import CheckOutcome, PipelineContext
from .flush import check_log_exactly_once, run_flush
from .materialise import MaterialiseRun, check_destination_matches_state, run_materialise
from .state import check_state_matches_log, run_state

__all__ = ["SyncPass", "follow", "sync_pass"]


@dataclass(frozen=True, slots=True)
class SyncPass:
    """What one pass of the sync job did, stage by stage, and the checks of what it wrote."""

    flush: FlushResult
    states: list[StateResult]
    compactions: list[CompactionResult]
    materialised: MaterialiseRun
    checks: dict[str, CheckOutcome] = field(default_factory=dict)
    seconds: float = 0.0


def sync_pass(
    ctx: PipelineContext,
    gw: str,
    *,
    checks: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> SyncPass:
    """Flush → state → compaction when due → materialise for ``gw``, then (``checks``) the
    checks of what the pass wrote: the log's ``exactly_once``, each table's
    ``matches_log_replay``, each primary destination table's ``matches_state``."""
    started = clock()
    flushed = run_flush(ctx, gw)
    states = run_state(ctx, gw)
    compactions = compact_due(ctx, gw)
    materialised = run_materialise(ctx, gw)
    outcomes: dict[str, CheckOutcome] = {}
    if checks and not flushed.empty:
        outcomes["exactly_once"] = check_log_exactly_once(ctx, gw)
        for state in states:
            outcomes[f"matches_log_replay {state.table}"] = check_state_matches_log(
                ctx, gw, state.table
            )
        for name, result in materialised.results:
            if ctx.destinations(gw)[name].primary:
                outcomes[f"matches_state {name}.{result.table}"] = check_destination_matches_state(
                    ctx, gw, name, result.table
                )
    return SyncPass(flushed, states, compactions, materialised, outcomes, clock() - started)


def follow(
    ctx: PipelineContext,
    gw: str,
    *,
    follow_s: float,
    max_s: float,
    on_pass: Callable[[SyncPass], None],
    poll_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    run_pass: Callable[[PipelineContext, str], SyncPass] = sync_pass,
) -> int:
    """Sync ``gw`` pass after pass while its WAL holds entries the lake lacks, until
    ``follow_s`` seconds pass with none or ``max_s`` seconds in all; return the passes made.

    ``on_pass`` receives each pass (the Dagster edge logs its materialisations). A pass whose
    check fails raises :class:`FlushError` naming it. ``run_pass`` makes a pass
    (:func:`sync_pass`)."""
    started = last = clock()
    passes = 0
    while True:
        now = clock()
        if now - started >= max_s or now - last >= follow_s:
            return passes
        if ctx.wal.stats(gw).backlog_entries == 0:
            sleep(poll_s)
            continue
        done = run_pass(ctx, gw)
        passes += 1
        last = clock()
        on_pass(done)
        failed = [f"{name}: {c.description}" for name, c in done.checks.items() if not c.passed]
        if failed:
            raise FlushError(f"a check of {gw!r}'s pass failed: {'; '.join(failed)}")
