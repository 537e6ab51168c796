"""The whole-lake audit of one gateway: the sync job's checks over everything, in a job of its own.

The sync job's checks (:mod:`assets.gateway_assets`) look at what the latest flush committed.
The audit runs the same checks over every cursor up to the lake watermark — each as a Spark
aggregate or join, destinations compared in batches — as asset checks on the same assets:

* ``exactly_once_audit`` on ``<gw>/lakesync_deltas``;
* ``matches_log_replay_audit`` on each ``<gw>/state/<table>``;
* ``matches_state_audit`` on each ``<gw>/<destination>/<table>`` (one op per destination; a
  best-effort destination's shortfall warns).

The job ``audit_<gw>`` runs them (no asset is materialised); a schedule launches it by name,
daily by default (:func:`sensors.schedules.build_audit_schedule`).
"""

from collections.abc import Iterator, Mapping

import dagster as dg

from lakesync_platform.core.schema import TableSchema
from lakesync_platform.declarations import DestinationDecl
from lakesync_platform.pipeline.flush import audit_log_exactly_once
from lakesync_platform.pipeline.materialise import audit_destination_matches_state
from lakesync_platform.pipeline.state import audit_state_matches_log
from resources.audit_runs import audit_job_name
from resources.lakesync import LakeSyncResource
from resources.sync_runs import GATEWAY_TAG

from .gateway_assets import check_result, destination_asset_keys, lake_asset_keys

__all__ = ["AUDIT_SUFFIX", "build_audit_defs"]

AUDIT_SUFFIX = "_audit"
"""Suffix of an audit check's name: ``exactly_once`` over the run, ``exactly_once_audit`` over
everything."""


def build_audit_defs(
    gw: str, tables: Mapping[str, TableSchema], destinations: Mapping[str, DestinationDecl]
) -> dg.Definitions:
    """The audit checks of ``gw``'s assets and the job ``audit_<gw>`` that runs them."""
    deltas_key, *state_asset_keys = lake_asset_keys(gw, tables)
    part = deltas_key.path[0]
    state_keys = dict(zip(tables, state_asset_keys, strict=True))
    dest_keys = destination_asset_keys(gw, tables, destinations)

    @dg.asset_check(
        asset=deltas_key,
        name=f"exactly_once{AUDIT_SUFFIX}",
        description="Every WAL entry up to the lake watermark is in the change log exactly once "
        "(the whole log).",
    )
    def log_audit(lakesync: LakeSyncResource) -> dg.AssetCheckResult:
        return check_result(audit_log_exactly_once(lakesync.context(), gw))

    checks: list[dg.AssetChecksDefinition] = [log_audit]
    if state_keys:
        name = f"matches_log_replay{AUDIT_SUFFIX}"

        @dg.multi_asset_check(
            name=f"{part}__state_audit",
            specs=[dg.AssetCheckSpec(name, asset=key) for key in state_keys.values()],
            can_subset=True,
        )
        def state_audit(
            context: dg.AssetCheckExecutionContext, lakesync: LakeSyncResource
        ) -> Iterator[dg.AssetCheckResult]:
            selected = {k.asset_key for k in context.selected_asset_check_keys}
            for table, key in state_keys.items():
                if key in selected:
                    outcome = audit_state_matches_log(lakesync.context(), gw, table)
                    yield check_result(outcome, asset_key=key, check_name=name)

        checks.append(state_audit)
    for dest_name in sorted({d for d, _ in dest_keys}):
        keys = {t: k for (d, t), k in dest_keys.items() if d == dest_name}
        checks.append(_destination_audit(gw, part, dest_name, keys, destinations[dest_name]))
    job = dg.define_asset_job(
        audit_job_name(gw),
        selection=dg.AssetSelection.checks(*(k for c in checks for k in c.check_keys)),
        description=f"Audit gateway {gw!r}: the sync job's checks over the whole lake.",
        tags={GATEWAY_TAG: gw},
    )
    return dg.Definitions(asset_checks=checks, jobs=[job])


def _destination_audit(
    gw: str, part: str, dest_name: str, keys: Mapping[str, dg.AssetKey], dest: DestinationDecl
) -> dg.AssetChecksDefinition:
    """``matches_state_audit`` for each table of one destination (its own op: a destination
    that is down fails only its own audit)."""
    name = f"matches_state{AUDIT_SUFFIX}"
    severity = dg.AssetCheckSeverity.ERROR if dest.primary else dg.AssetCheckSeverity.WARN

    @dg.multi_asset_check(
        name=f"{part}__{dest_name}__audit",
        specs=[dg.AssetCheckSpec(name, asset=key) for key in keys.values()],
        can_subset=True,
    )
    def destination_audit(
        context: dg.AssetCheckExecutionContext, lakesync: LakeSyncResource
    ) -> Iterator[dg.AssetCheckResult]:
        selected = {k.asset_key for k in context.selected_asset_check_keys}
        for table, key in keys.items():
            if key in selected:
                outcome = audit_destination_matches_state(lakesync.context(), gw, dest_name, table)
                yield check_result(outcome, severity, asset_key=key, check_name=name)

    return destination_audit
