"""The Dagster code location: definitions load, the sync job runs, sensors decide right."""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from assets.definitions import build_definitions
from assets.gateway_assets import LAYER_TAG
from lakesync_platform.cli.dev import DevStackSettings
from lakesync_platform.declarations import parse_declarations
from lakesync_platform.testing import DEMO_GATEWAY, demo_todos_schema
from lakesync_platform.wal.store import WriteAheadLog
from resources.sync_runs import FLUSH_REQUESTS_TAG, GATEWAY_TAG, sync_job_name
from sensors.backlog import backlog_decision
from tests.helpers import ROOT

from .conftest import TODOS, Pusher
from .lock_holder import Holder, Waiting


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    """An ephemeral Dagster instance, disposed after the test (its temporary folder with it,
    not left to a garbage collection during a later test)."""
    with dg.DagsterInstance.ephemeral() as made:
        yield made


def _tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, defs: dg.Definitions) -> Any:
    """Evaluate one sensor tick with the definitions' resources."""
    with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
        return sensor(context)


def _write_defs(folder: Path, gw: str, dest_db: Path) -> None:
    folder.mkdir(exist_ok=True)
    doc = {
        "gateway": gw,
        "tables": [
            {"table": "todos", "columns": [{"name": c.name, "type": c.type} for c in TODOS.columns]}
        ],
        "destinations": [
            {"name": "local", "kind": "sqlite", "url": f"sqlite:///{dest_db}", "tables": ["todos"]}
        ],
    }
    (folder / "todos.yaml").write_text(yaml.safe_dump(doc))


@pytest.fixture
def env(tmp_path: Path, gw: str, wal_url: str, lake_dir: Path) -> dict[str, str]:
    """Environment of a code location over the test WAL and the shared lake."""
    _write_defs(tmp_path / "defs", gw, tmp_path / "dest.db")
    return {
        "LAKESYNC_DATA_DIR": str(lake_dir),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_DEFS_DIR": str(tmp_path / "defs"),
        "LAKESYNC_BACKLOG_BYTES": "400",
        "LAKESYNC_BACKLOG_AGE_SECONDS": "1000000000",  # test WAL clock is fixed in the past
    }


@pytest.fixture
def defs(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dg.Definitions:
    """The definitions for ``env`` (EnvVar resources resolve from the process environment)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return build_definitions(env)


def test_definitions_load_with_declared_and_registered_tables(
    env: dict[str, str], gw: str, wal: WriteAheadLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakesync_platform.core.schema import parse_table_schema

    # A table registered only through the config store (as the admin route does).
    wal.save_schema(
        gw, parse_table_schema({"table": "notes", "columns": [{"name": "body", "type": "string"}]})
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    defs = build_definitions(env)
    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert {
        f"{gw}/lakesync_deltas",
        f"{gw}/state/todos",
        f"{gw}/state/notes",
        f"{gw}/local/todos",
    } <= keys
    assert f"{gw}/local/notes" not in keys  # the destination lists only todos
    assert set(wal.schemas(gw)) == {"todos", "notes"}  # declarations applied to the store
    names = {s.name for s in repo.sensor_defs}
    job = sync_job_name(gw)
    assert {f"{job}_backlog", f"{job}_flush_requests"} <= names
    assert repo.has_job(job)


def test_state_and_destination_assets_of_a_table_tell_apart(defs: dg.Definitions, gw: str) -> None:
    """Both show as "todos" in the UI; description, kinds and layer tag say which is which."""
    graph = defs.get_repository_def().asset_graph
    state = graph.get(dg.AssetKey([gw, "state", "todos"]))
    dest = graph.get(dg.AssetKey([gw, "local", "todos"]))
    assert state.description is not None and dest.description is not None
    assert state.description.startswith("Iceberg state table of 'todos' (lake)")
    assert dest.description.startswith("'todos' in destination 'local' (sqlite)")
    assert "iceberg" in state.kinds and "sqlite" not in state.kinds
    assert dest.kinds == {"sqlite"}
    assert state.tags[LAYER_TAG] == "lake" and dest.tags[LAYER_TAG] == "destination"


def test_docs_state_the_demo_backlog_thresholds() -> None:
    """docs/pipeline.md names the thresholds ``lakesync dev`` gives the backlog sensor."""
    defaults = {f.name: f.default for f in dataclasses.fields(DevStackSettings)}
    text = (ROOT / "docs" / "pipeline.md").read_text()
    assert f"LAKESYNC_BACKLOG_BYTES={defaults['backlog_bytes']}" in text
    assert f"LAKESYNC_BACKLOG_AGE_SECONDS={defaults['backlog_age_seconds']}" in text


def test_readme_yaml_declares_the_demo_table() -> None:
    """The README's declarations example is the demo's table (defs/todos.yaml) with another
    destination, and says so rather than claiming to be that file."""
    readme = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"```yaml\n(#[^\n]*\ngateway:.*?)```", readme, re.S)
    assert not block.startswith("# defs/todos.yaml\n")
    decls = parse_declarations([("README.md", yaml.safe_load(block))])
    shipped = parse_declarations(
        [("todos.yaml", yaml.safe_load((ROOT / "defs" / "todos.yaml").read_text()))]
    )
    readme_gw = decls.gateways[DEMO_GATEWAY]
    assert readme_gw.tables == shipped.gateways[DEMO_GATEWAY].tables
    assert readme_gw.tables == {"todos": demo_todos_schema()}
    assert {d.kind for d in readme_gw.destinations.values()} == {"postgres"}


@pytest.mark.spark
def test_sync_job_runs_every_stage_and_checks_pass(
    env: dict[str, str],
    gw: str,
    pusher: Pusher,
    wal: WriteAheadLog,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    instance: dg.DagsterInstance,
) -> None:
    from lakesync_platform.core.schema import parse_table_schema
    from lakesync_platform.spark.layout import state_table

    # notes: registered through the config store before the code location loads;
    # later: registered after it loaded (no asset yet) — both flow through the job.
    wal.save_schema(
        gw, parse_table_schema({"table": "notes", "columns": [{"name": "body", "type": "string"}]})
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    defs = build_definitions(env)
    wal.save_schema(
        gw, parse_table_schema({"table": "later", "columns": [{"name": "body", "type": "string"}]})
    )
    pusher.write("a", "l1", table="later", body="after load")
    pusher.write("a", "r1", title="one", done=False)
    pusher.write("b", "r2", title="two", priority=2)
    pusher.delete("a", "r2")
    pusher.write("a", "n1", table="notes", body="registered at runtime")
    request = wal.request_flush(gw, 1)
    sensor = defs.resolve_sensor_def(f"{sync_job_name(gw)}_flush_requests")
    run_request = _tick(sensor, instance, defs)
    assert isinstance(run_request, dg.RunRequest)
    assert run_request.tags[FLUSH_REQUESTS_TAG] == request.request_id
    assert wal.flush_requests(gw, "running")[0].request_id == request.request_id
    result = defs.resolve_job_def(sync_job_name(gw)).execute_in_process(
        instance=instance, tags=run_request.tags
    )
    assert result.success
    materialised = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert {f"{gw}/lakesync_deltas", f"{gw}/state/todos", f"{gw}/local/todos"} <= materialised
    assert f"{gw}/state/notes" in materialised  # registered through the store, not declared
    assert spark.table(state_table(gw, "later")).count() == 1
    evaluations = result.get_asset_check_evaluations()
    assert evaluations and all(c.passed for c in evaluations)
    assert {c.check_name for c in evaluations} == {
        "exactly_once",
        "matches_log_replay",
        "matches_state",
    }
    (flush_event,) = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey([gw, "lakesync_deltas"])
    ]
    meta = flush_event.materialization.metadata
    assert meta["entries"].value == 5
    done = [r for r in wal.flush_requests(gw, None) if r.request_id == request.request_id]
    assert done[0].status == "succeeded" and "5 entries" in (done[0].detail or "")
    assert wal.flush_watermark(gw) == wal.max_cursor(gw)
    # Nothing pending any more: the sensor skips.
    assert isinstance(_tick(sensor, instance, defs), dg.SkipReason)


@pytest.mark.spark
def test_sync_job_waits_for_a_stage_another_process_runs(
    defs: dg.Definitions,
    gw: str,
    pusher: Pusher,
    wal: WriteAheadLog,
    lake_dir: Path,
    holders: list[Holder],
    waiting: Waiting,
) -> None:
    pusher.write("a", "r1", title="one")
    pusher.write("b", "r2", title="two")
    holder = Holder("file", str((lake_dir / "catalog.db.lock").resolve()), "state", "elsewhere")
    holders.append(holder)

    def release_once_waited_for() -> None:
        if waiting.seen.wait(120):
            holder.release()

    releaser = threading.Thread(target=release_once_waited_for)
    releaser.start()
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def(sync_job_name(gw)).execute_in_process(instance=instance)
    releaser.join()
    assert result.success
    assert waiting.messages[0].startswith(
        f"waiting for state of elsewhere held by pid {holder.pid}"
    )
    evaluations = result.get_asset_check_evaluations()
    assert evaluations and all(c.passed for c in evaluations)
    assert wal.flush_watermark(gw) == 2


def test_backlog_sensor_fires_on_size_and_skips_below(
    defs: dg.Definitions, gw: str, pusher: Pusher, instance: dg.DagsterInstance
) -> None:
    sensor = defs.resolve_sensor_def(f"{sync_job_name(gw)}_backlog")

    def tick() -> Any:
        return _tick(sensor, instance, defs)

    assert isinstance(tick(), dg.SkipReason)  # empty WAL
    pusher.write("a", "r1", title="x")
    below = tick()
    assert isinstance(below, dg.SkipReason) and "below limits" in str(below.skip_message)
    for i in range(10):
        pusher.write("a", f"r{i}", title="a longer title " * 3)
    fired = tick()
    assert isinstance(fired, dg.RunRequest)
    assert fired.tags["lakesync/trigger"] == "backlog"


def test_backlog_decision_rule() -> None:
    assert backlog_decision(10, None, 0, 100, 60) is None
    assert backlog_decision(100, None, 0, 100, 60) is not None
    assert backlog_decision(1, 1_000, 61_000, 100, 60) is not None
    assert backlog_decision(1, 1_000, 30_000, 100, 60) is None


def _failed_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> tuple[Any, Any]:
    """A run that failed with ``tags``, and its failure event."""

    @dg.op
    def boom() -> None:
        raise RuntimeError("boom")

    @dg.job(name="failing_sync")
    def failing() -> None:
        boom()

    result = failing.execute_in_process(instance=instance, tags=tags, raise_on_error=False)
    assert not result.success
    (event,) = [e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE]
    return result.dagster_run, event


def test_failure_sensor_marks_a_failed_runs_requests_among_many(
    defs: dg.Definitions, gw: str, wal: WriteAheadLog, instance: dg.DagsterInstance
) -> None:
    # More than 100 older requests, of this gateway and of another one, all before the run's.
    for i in range(120):
        old = wal.request_flush(gw, 10 + i)
        wal.update_flush_request(old.request_id, "succeeded", "done", 10 + i)
        wal.request_flush("other_gateway", 10 + i)
    request = wal.request_flush(gw, 1_000)
    wal.update_flush_request(request.request_id, "running", "sync run requested", 1_000)
    run, event = _failed_run(instance, {FLUSH_REQUESTS_TAG: request.request_id, GATEWAY_TAG: gw})
    sensor = defs.resolve_sensor_def("lakesync_flush_request_failures")
    with dg.build_run_status_sensor_context(
        sensor_name=sensor.name,
        dagster_event=event,
        dagster_instance=instance,
        dagster_run=run,
        resources=defs.resources,
    ) as context:
        sensor(context.for_run_failure())
    (marked,) = [
        r for r in wal.flush_requests(gw, None, 1_000) if r.request_id == request.request_id
    ]
    assert marked.status == "failed" and "boom" in (marked.detail or "")
    assert len(wal.flush_requests(gw, "succeeded", 1_000)) == 120  # the others stay as they were


@pytest.mark.spark
def test_audit_job_runs_the_checks_over_the_whole_lake_on_a_daily_schedule(
    defs: dg.Definitions, gw: str, pusher: Pusher, instance: dg.DagsterInstance
) -> None:
    from resources.audit_runs import audit_job_name

    schedule = defs.resolve_schedule_def(f"{audit_job_name(gw)}_schedule")
    assert schedule.cron_schedule == "30 4 * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    for round_ in range(2):
        pusher.write("a", f"r{round_}", title="one")
        pusher.write("b", "shared", title=f"round {round_}")
        sync = defs.resolve_job_def(sync_job_name(gw)).execute_in_process(instance=instance)
        assert sync.success
    audit = defs.resolve_job_def(audit_job_name(gw)).execute_in_process(instance=instance)
    assert audit.success
    assert not audit.get_asset_materialization_events()  # checks only
    evaluations = audit.get_asset_check_evaluations()
    assert {c.check_name for c in evaluations} == {
        "exactly_once_audit",
        "matches_log_replay_audit",
        "matches_state_audit",
    }
    assert all(c.passed for c in evaluations), [c.description for c in evaluations]
    replay = next(c for c in evaluations if c.check_name == "matches_log_replay_audit")
    assert replay.metadata["rows"].value == 3  # the whole state, not the last run's range
