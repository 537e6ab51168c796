"""Assets, asset checks and the sync job of one gateway.

Asset keys (group = gateway id):

* ``<gw>/lakesync_deltas`` — the Iceberg change log (flush);
* ``<gw>/state/<table>`` — one Iceberg state table per table (state);
* ``<gw>/<destination>/<table>`` — one destination table per declared destination and table.

The UI names an asset by the last part of its key, so a state table and its destination tables
share a name; their descriptions, kinds (``iceberg`` vs ``sqlite``/``postgres``/``mysql``) and
the tag ``lakesync/layer`` (``lake`` vs ``destination``) tell them apart.

The job ``sync_<gw>`` (:func:`resources.sync_runs.sync_job_name`) materialises all of them in
order, so state and destinations always follow a flush; sensors and the schedule launch it by
name. Its runs carry the tag ``lakesync/gateway=<gw>``: a Dagster tag concurrency limit of 1 on
it (``lakesync dev`` configures one) keeps one run per gateway at a time, and the sensors skip
while a run of the job is active.
"""

import time
from collections.abc import Iterable, Iterator, Mapping

import dagster as dg

from lakesync_platform.core.schema import TableSchema
from lakesync_platform.declarations import DestinationDecl
from lakesync_platform.pipeline.compaction import compact_due
from lakesync_platform.pipeline.context import CheckOutcome
from lakesync_platform.pipeline.flush import check_log_exactly_once, run_flush
from lakesync_platform.pipeline.follow import SyncPass, follow
from lakesync_platform.pipeline.materialise import (
    MaterialiseRun,
    check_destination_lag,
    check_destination_matches_state,
    run_materialise,
)
from lakesync_platform.pipeline.state import check_state_matches_log, run_state
from lakesync_platform.spark.layout import DELTAS_TABLE
from resources.lakesync import LakeSyncResource
from resources.sync_runs import FLUSH_REQUESTS_TAG, GATEWAY_TAG, sync_job_name

__all__ = [
    "LAYER_TAG",
    "ROLE_TAG",
    "build_gateway_defs",
    "check_result",
    "destination_asset_keys",
    "lake_asset_keys",
]

LAYER_TAG = "lakesync/layer"
"""Asset tag naming where an asset's data lives: ``lake`` (Iceberg) or ``destination``."""
ROLE_TAG = "lakesync/role"
"""Asset tag of a destination table: ``primary`` or ``best_effort``."""


def _key_part(gw: str) -> str:
    return gw.replace("-", "_")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _mark_requests(
    resource: LakeSyncResource, context: dg.AssetExecutionContext, status: str, detail: str
) -> None:
    ids = context.run.tags.get(FLUSH_REQUESTS_TAG, "")
    for request_id in filter(None, ids.split(",")):
        resource.wal().update_flush_request(request_id, status, detail, _now_ms())


def lake_asset_keys(gw: str, tables: Iterable[str]) -> list[dg.AssetKey]:
    """The keys of ``gw``'s lake assets: the change log, then each table's state."""
    part = _key_part(gw)
    states = [dg.AssetKey([part, "state", t]) for t in tables]
    return [dg.AssetKey([part, "lakesync_deltas"]), *states]


def destination_asset_keys(
    gw: str, tables: Iterable[str], destinations: Mapping[str, DestinationDecl]
) -> dict[tuple[str, str], dg.AssetKey]:
    """The key of each destination table, by ``(destination, table)``."""
    part = _key_part(gw)
    return {
        (d, t): dg.AssetKey([part, d, t])
        for d, dest in destinations.items()
        for t in tables
        if dest.covers(t)
    }


def build_gateway_defs(
    gw: str, tables: Mapping[str, TableSchema], destinations: Mapping[str, DestinationDecl]
) -> dg.Definitions:
    """The assets, checks and sync job of ``gw`` for the tables and destinations known now."""
    part = _key_part(gw)
    deltas_key, *state_asset_keys = lake_asset_keys(gw, tables)
    state_keys = dict(zip(tables, state_asset_keys, strict=True))
    dest_keys = destination_asset_keys(gw, tables, destinations)

    @dg.asset(
        key=deltas_key,
        group_name=part,
        kinds={"iceberg", "spark"},
        description=f"Iceberg change log of gateway {gw!r}: every WAL entry exactly once.",
    )
    def change_log(
        context: dg.AssetExecutionContext, lakesync: LakeSyncResource
    ) -> dg.MaterializeResult:
        try:
            result = run_flush(lakesync.context(), gw)
        except Exception as exc:
            _mark_requests(lakesync, context, "failed", f"flush failed: {exc}"[:2000])
            raise
        detail = (
            f"flushed {result.entries} entries (cursor {result.from_cursor}..{result.to_cursor})"
        )
        _mark_requests(lakesync, context, "succeeded", detail)
        return dg.MaterializeResult(
            metadata={
                "entries": result.entries,
                "lake_bytes": result.lake_bytes,
                "wal_range": f"{result.from_cursor}..{result.to_cursor}",
                "lake_watermark": result.to_cursor,
                "snapshot_id": str(result.snapshot_id),
                "seconds": round(result.seconds, 3),
            }
        )

    assets: list[dg.AssetsDefinition] = [change_log]

    if state_keys:

        @dg.multi_asset(
            name=f"{part}__state",
            specs=[
                dg.AssetSpec(
                    key,
                    deps=[deltas_key],
                    group_name=part,
                    kinds={"iceberg", "spark"},
                    tags={LAYER_TAG: "lake"},
                    description=(
                        f"Iceberg state table of {t!r} (lake): per-column LWW state of gateway "
                        f"{gw!r}, merged from the change log with MERGE INTO."
                    ),
                )
                for t, key in state_keys.items()
            ],
            can_subset=True,
        )
        def state(
            context: dg.AssetExecutionContext, lakesync: LakeSyncResource
        ) -> Iterator[dg.MaterializeResult]:
            ctx = lakesync.context()
            selected = [t for t, k in state_keys.items() if k in context.selected_asset_keys]
            if len(selected) == len(state_keys):
                # Tables registered after this code location loaded flow through as well; their
                # assets appear on the next reload.
                selected += [t for t in ctx.tables(gw) if t not in state_keys]
            merged = run_state(ctx, gw, selected)
            # The lake stays compact: tables past the small-file threshold are compacted here.
            compacted = {c.table: c for c in compact_due(ctx, gw)}
            for r in merged:
                if r.table not in state_keys:
                    context.log.info(f"state of runtime-registered table {r.table!r}: {r}")
                    continue
                metadata: dict[str, object] = {
                    "rows_changed": r.rows_changed,
                    "live_changed": r.live_changed,
                    "log_range": f"{r.from_cursor}..{r.to_cursor}",
                    "seconds": round(r.seconds, 3),
                    "snapshot_id": str(r.snapshot_id),
                }
                done = compacted.get(r.table)
                if done is not None:
                    metadata["compacted_files"] = (
                        f"{done.before.data_files}+{done.before.delete_files} → "
                        f"{done.after.data_files}+{done.after.delete_files} in "
                        f"{done.seconds:.2f}s"
                    )
                yield dg.MaterializeResult(asset_key=state_keys[r.table], metadata=metadata)
            if DELTAS_TABLE in compacted:
                log = compacted[DELTAS_TABLE]
                context.log.info(
                    f"compacted the change log: {log.before.data_files} → "
                    f"{log.after.data_files} data files in {log.seconds:.2f}s"
                )
            if not dest_keys and len(selected) >= len(state_keys):  # the job's last step
                _follow(context, lakesync, gw, deltas_key, state_keys, dest_keys)

        assets.append(state)

    if dest_keys:

        @dg.multi_asset(
            name=f"{part}__materialise",
            specs=[
                dg.AssetSpec(
                    key,
                    deps=[state_keys[t]],
                    group_name=part,
                    kinds={destinations[d].kind},
                    tags={LAYER_TAG: "destination", ROLE_TAG: destinations[d].role},
                    description=(
                        f"{t!r} in destination {d!r} ({destinations[d].kind}), materialised "
                        f"from the lake's state table of gateway {gw!r}."
                        + ("" if destinations[d].primary else _BEST_EFFORT_NOTE)
                    ),
                    # A best-effort destination that stays down yields nothing; the run goes on.
                    skippable=not destinations[d].primary,
                )
                for (d, t), key in dest_keys.items()
            ],
            can_subset=True,
        )
        def materialise(
            context: dg.AssetExecutionContext, lakesync: LakeSyncResource
        ) -> Iterator[dg.MaterializeResult]:
            ctx = lakesync.context()
            selected = [dt for dt, k in dest_keys.items() if k in context.selected_asset_keys]
            everything = len(selected) == len(dest_keys)
            names = sorted({d for d, _ in selected})
            chosen = None if everything else sorted({t for _, t in selected})
            run = run_materialise(ctx, gw, names, chosen)
            for d, r in run.results:
                if (d, r.table) not in dest_keys:
                    context.log.info(f"materialised runtime-registered table: {r}")
                    continue
                metadata: dict[str, object] = {
                    "upserted": r.upserted,
                    "deleted": r.deleted,
                    "state_range": f"{r.from_cursor}..{r.to_cursor}",
                    "seconds": round(r.seconds, 3),
                    "state_snapshot_id": str(r.state_snapshot_id),
                }
                if (d, r.table) in run.lag:
                    metadata["lag"] = _lag_value(run.lag[(d, r.table)])
                yield dg.MaterializeResult(asset_key=dest_keys[(d, r.table)], metadata=metadata)
            for f in run.failures:
                context.log.warning(
                    f"best-effort destination {f.destination!r} failed for {f.table!r} after "
                    f"{f.attempts} attempts: {f.error}"
                )
            if run.lag:
                context.instance.add_run_tags(context.run.run_id, _lag_tags(run))
            if everything:  # the job's last step
                _follow(context, lakesync, gw, deltas_key, state_keys, dest_keys)

        assets.append(materialise)

    best_effort = frozenset(d for d, dest in destinations.items() if not dest.primary)
    checks = _build_checks(gw, deltas_key, state_keys, dest_keys, best_effort)
    # The group's assets with these checks only: the audit's checks on the same assets run in
    # their own job (assets.audit_assets).
    own_checks = dg.AssetSelection.checks(*(k for c in checks for k in c.check_keys))
    job = dg.define_asset_job(
        sync_job_name(gw),
        selection=dg.AssetSelection.groups(part).without_checks() | own_checks,
        description=f"Flush gateway {gw!r} to the lake, merge state, materialise destinations.",
        tags={GATEWAY_TAG: gw},
    )
    return dg.Definitions(assets=assets, asset_checks=checks, jobs=[job])


def _follow(
    context: dg.AssetExecutionContext,
    lakesync: LakeSyncResource,
    gw: str,
    deltas_key: dg.AssetKey,
    state_keys: Mapping[str, dg.AssetKey],
    dest_keys: Mapping[tuple[str, str], dg.AssetKey],
) -> None:
    """Follow the gateway (``LAKESYNC_FOLLOW_SECONDS``): sync passes while changes keep coming,
    each logged as materialisations of the assets it wrote
    (:mod:`lakesync_platform.pipeline.follow`)."""
    ctx = lakesync.context()
    if ctx.settings.follow_s <= 0:
        return

    def logged(done: SyncPass) -> None:
        f = done.flush
        context.log_event(dg.AssetMaterialization(deltas_key, metadata={
            "entries": f.entries, "wal_range": f"{f.from_cursor}..{f.to_cursor}",
            "lake_watermark": f.to_cursor, "seconds": round(f.seconds, 3), "pass": "follow",
        }))  # fmt: skip
        for r in done.states:
            if r.table in state_keys:
                context.log_event(dg.AssetMaterialization(state_keys[r.table], metadata={
                    "rows_changed": r.rows_changed, "log_range": f"{r.from_cursor}..{r.to_cursor}",
                    "seconds": round(r.seconds, 3), "pass": "follow",
                }))  # fmt: skip
        for d, r in done.materialised.results:
            if (d, r.table) in dest_keys:
                context.log_event(dg.AssetMaterialization(dest_keys[(d, r.table)], metadata={
                    "upserted": r.upserted, "deleted": r.deleted,
                    "state_range": f"{r.from_cursor}..{r.to_cursor}",
                    "seconds": round(r.seconds, 3), "pass": "follow",
                }))  # fmt: skip
        checks = ", ".join(f"{n} {'ok' if c.passed else 'FAILED'}" for n, c in done.checks.items())
        context.log.info(f"follow pass of {gw!r} in {done.seconds:.2f}s: {checks}")

    passes = follow(
        ctx, gw, follow_s=ctx.settings.follow_s, max_s=ctx.settings.follow_max_s, on_pass=logged
    )
    context.log.info(f"followed {gw!r} for {passes} more pass(es)")


_ERROR = dg.AssetCheckSeverity.ERROR
_BEST_EFFORT_NOTE = (
    " Best effort: retried, a failure does not fail the run; its lag behind the primary "
    "destination is checked."
)


def _destination_checks(
    gw: str,
    dest_name: str,
    dest_keys: Mapping[tuple[str, str], dg.AssetKey],
    best_effort: bool,
) -> dg.AssetChecksDefinition:
    """``matches_state`` for each table of one destination, and ``lag_behind_primary`` for a
    best-effort one (whose shortfall warns: it never fails the run)."""
    keys = {t: k for (d, t), k in dest_keys.items() if d == dest_name}
    names = ["matches_state", *(["lag_behind_primary"] if best_effort else [])]
    specs = [dg.AssetCheckSpec(n, asset=key) for key in keys.values() for n in names]
    severity = dg.AssetCheckSeverity.WARN if best_effort else _ERROR

    @dg.multi_asset_check(
        name=f"{_key_part(gw)}__{dest_name}__checks", specs=specs, can_subset=True
    )
    def destination_checks(
        context: dg.AssetCheckExecutionContext, lakesync: LakeSyncResource
    ) -> Iterator[dg.AssetCheckResult]:
        selected = set(context.selected_asset_check_keys)
        for table, key in keys.items():
            if dg.AssetCheckKey(key, "matches_state") in selected:
                outcome = check_destination_matches_state(lakesync.context(), gw, dest_name, table)
                yield check_result(
                    outcome, asset_key=key, check_name="matches_state", severity=severity
                )
            if dg.AssetCheckKey(key, "lag_behind_primary") in selected:
                outcome = check_destination_lag(lakesync.context(), gw, dest_name, table)
                yield check_result(
                    outcome, asset_key=key, check_name="lag_behind_primary", severity=severity
                )

    return destination_checks


def _lag_value(lag: int | None) -> int | str:
    return "unknown" if lag is None else lag


def _lag_tags(run: MaterialiseRun) -> dict[str, str]:
    """Run tags: each best-effort destination table's lag (state cursors behind the primary)
    and the ones that failed, e.g. ``lakesync/lag.backup.todos = 3``."""
    out = {f"lakesync/lag.{d}.{t}": str(_lag_value(lag)) for (d, t), lag in run.lag.items()}
    out.update({f"lakesync/failed.{f.destination}.{f.table}": f.error[:200] for f in run.failures})
    return out


def check_result(
    outcome: CheckOutcome,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
    **target: str | dg.AssetKey,
) -> dg.AssetCheckResult:
    """A check's outcome as Dagster's result (list metadata joined for the UI)."""
    metadata = {
        k: ", ".join(map(str, v)) if isinstance(v, list | tuple) else v
        for k, v in outcome.metadata.items()
    }
    return dg.AssetCheckResult(
        passed=outcome.passed,
        description=outcome.description,
        metadata=metadata,
        severity=severity,
        **target,
    )


def _build_checks(
    gw: str,
    deltas_key: dg.AssetKey,
    state_keys: Mapping[str, dg.AssetKey],
    dest_keys: Mapping[tuple[str, str], dg.AssetKey],
    best_effort: frozenset[str] = frozenset(),
) -> list[dg.AssetChecksDefinition]:
    part = _key_part(gw)

    @dg.asset_check(
        asset=deltas_key,
        name="exactly_once",
        description="Every WAL entry the latest flush committed is in the change log exactly once "
        "(the whole log: exactly_once_audit, job audit_<gw>).",
    )
    def log_exactly_once(lakesync: LakeSyncResource) -> dg.AssetCheckResult:
        return check_result(check_log_exactly_once(lakesync.context(), gw))

    checks: list[dg.AssetChecksDefinition] = [log_exactly_once]
    if state_keys:
        specs = [dg.AssetCheckSpec("matches_log_replay", asset=key) for key in state_keys.values()]

        @dg.multi_asset_check(name=f"{part}__state_checks", specs=specs, can_subset=True)
        def state_checks(
            context: dg.AssetCheckExecutionContext, lakesync: LakeSyncResource
        ) -> Iterator[dg.AssetCheckResult]:
            selected = {k.asset_key for k in context.selected_asset_check_keys}
            for table, key in state_keys.items():
                if key not in selected:
                    continue
                outcome = check_state_matches_log(lakesync.context(), gw, table)
                yield check_result(outcome, asset_key=key, check_name="matches_log_replay")

        checks.append(state_checks)
    # One check op per destination: a best-effort destination skipped in a run (it was down)
    # skips its own checks only.
    for dest_name in sorted({d for d, _ in dest_keys}):
        checks.append(_destination_checks(gw, dest_name, dest_keys, dest_name in best_effort))
    return checks
